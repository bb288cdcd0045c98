//! `bench ingest`: the Signals API on SQLite and PostgreSQL. For each connection count:
//! `/livez` (no storage work, the machine's ceiling) and single events, interleaved in
//! one-second slices so that their ratio compares like with like; batches of 100; single
//! events paced at half their peak; and, at the end, the server's peak RSS.

use anyhow::Result;
use bytes::Bytes;

use crate::cpu;
use crate::load::{Load, LoadArgs, drive, interleave, percentile, report, report_head};
use crate::procs::{peak_rss_mb, start};

/// Options of `bench ingest`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Connections, seconds, cloud threads.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Also measure on this PostgreSQL (a fresh schema is created and dropped).
    #[arg(long)]
    pub pg_url: Option<String>,
    /// Instead: single events and batches of this build against the `cloud` in this
    /// directory (another build), on SQLite (and on PostgreSQL with --pg-url, each server in
    /// its own schema), interleaved in one run.
    #[arg(long)]
    pub compare_bin_dir: Option<std::path::PathBuf>,
    /// With --compare-bin-dir: batches of a mixed stream (1 deployment, 4 alerts, 2 changes
    /// and 3 custom events in 10) instead of deployments only.
    #[arg(long)]
    pub mix: bool,
}

/// Event `i` of a mixed stream: 10% deployments, 40% alerts, 20% changes, 30% custom.
fn mixed(i: usize) -> serde_json::Value {
    let service = format!("svc-{}", i % 10);
    match i % 10 {
        0 => event(i),
        1..=4 => {
            serde_json::json!({"type": "alert", "service": service, "environment": "production",
            "status": "triggered", "severity": "warning", "title": "Latency above SLO",
            "dedupKey": format!("lat-{}", i % 50)})
        }
        5 | 6 => {
            serde_json::json!({"type": "change", "service": service, "environment": "production",
            "summary": "feature flag toggled"})
        }
        _ => serde_json::json!({"type": "custom", "name": "cache.flush", "service": service}),
    }
}

fn event(i: usize) -> serde_json::Value {
    serde_json::json!({
        "type": "deployment", "repository": "acme/api", "service": format!("svc-{}", i % 10),
        "version": "v1.2.3", "sha": "abc123def456", "environment": "production",
        "triggeredBy": "bench", "status": "success",
        "metadata": {"workflow": "deploy", "runId": i.to_string()}
    })
}

/// One connection count's headline figures, for the summary.
struct Row {
    connections: usize,
    ceiling: f64,
    single: f64,
    batch: f64,
    half_p99_ms: f64,
}

async fn bench_backend(name: &str, db: &[String], args: &Args) -> Result<()> {
    let (server, signal_key, api_key) = start(db, args.load.cloud_threads)?;
    let single = Load {
        method: hyper::Method::POST,
        path: format!("/v1/signals/{signal_key}"),
        api_key: api_key.clone(),
        body: Bytes::from(event(1).to_string()),
    };
    let batch = Load {
        body: Bytes::from(serde_json::Value::Array((0..100).map(event).collect()).to_string()),
        ..single.clone()
    };
    let livez = Load {
        method: hyper::Method::GET,
        path: "/livez".into(),
        body: Bytes::new(),
        ..single.clone()
    };
    let procs = [("client", std::process::id()), ("cloud", server.child.id())];
    let s = args.load.seconds;
    let mut rows = Vec::new();
    for &c in &args.load.connections {
        println!(
            "\n== {name}: {c} connections; /livez and single events interleaved, {s} one-second slices each"
        );
        report_head("events/s");
        let before = commit_totals(server.addr).await?;
        let (ceiling_run, single_run) =
            interleave((server.addr, &livez), (server.addr, &single), c, s, &procs).await;
        let after = commit_totals(server.addr).await?;
        let ceiling = report("GET /livez (no storage, ceiling)", &ceiling_run.outcome, 1);
        let peak = report("POST single event", &single_run.outcome, 1);
        let commits = after.count - before.count;
        println!(
            "  single events: {commits:.0} group commits, {:.1} requests and {:.2} ms each on average",
            (after.requests - before.requests) / commits.max(1.0),
            1000.0 * (after.seconds - before.seconds) / commits.max(1.0),
        );
        let batch_rate = report(
            "POST batch of 100",
            &drive(server.addr, batch.clone(), c, s, None).await,
            100,
        );
        let half = peak / 2.0;
        let paced = drive(server.addr, single.clone(), c, s, Some(half)).await;
        report(
            &format!("POST single at {half:.0}/s (half peak)"),
            &paced,
            1,
        );
        println!("single events / ceiling: {:.0}%", 100.0 * peak / ceiling);
        // The ratio as a CPU budget: what 50% of the ceiling would allow, against what is spent.
        let livez_cpu = ceiling_run.ticks.per_request(ceiling_run.outcome.requests);
        let single_cpu = single_run.ticks.per_request(single_run.outcome.requests);
        println!("  /livez: {}", livez_cpu.describe());
        println!("  single: {}", single_cpu.describe());
        println!(
            "  50% of the ceiling ({:.0}/s) allows {:.1} µs of CPU per event on {} cores, load generator included",
            0.5 * ceiling,
            cpu::budget_us(0.5 * ceiling),
            cpu::cores()
        );
        if !db.is_empty() {
            println!(
                "  (PostgreSQL's own processes are not in these figures; their CPU is not idle)"
            );
        }
        rows.push(Row {
            connections: c,
            ceiling,
            single: peak,
            batch: batch_rate,
            half_p99_ms: percentile(&paced.latencies_us, 0.99),
        });
    }
    println!("\n{name} summary");
    println!(
        "{:>11} {:>10} {:>10} {:>7} {:>12} {:>17}",
        "connections", "/livez/s", "single/s", "ratio", "batched ev/s", "p99 at half peak"
    );
    for r in &rows {
        println!(
            "{:>11} {:>10.0} {:>10.0} {:>6.0}% {:>12.0} {:>14.2} ms",
            r.connections,
            r.ceiling,
            r.single,
            100.0 * r.single / r.ceiling,
            r.batch,
            r.half_p99_ms
        );
    }
    println!("server peak RSS: {:.1} MB", peak_rss_mb(server.child.id()));
    Ok(())
}

/// This build against another, interleaved: events/s of each and their ratio. `dbs` are the
/// two servers' storage arguments (empty: SQLite each in its own data dir).
async fn compare(
    other: &std::path::Path,
    args: &Args,
    (backend, db_a, db_b): (&str, &[String], &[String]),
) -> Result<()> {
    let (this, key_a, api_a) = start(db_a, args.load.cloud_threads)?;
    let (that, key_b, api_b) = crate::procs::start_from(other, db_b, args.load.cloud_threads)?;
    let load = |key: &str, api: &str, n: usize| Load {
        method: hyper::Method::POST,
        path: format!("/v1/signals/{key}"),
        api_key: api.to_string(),
        body: Bytes::from(if n == 1 {
            event(1).to_string()
        } else {
            let make = if args.mix { mixed } else { event };
            serde_json::Value::Array((0..n).map(make).collect()).to_string()
        }),
    };
    let procs = [
        ("client", std::process::id()),
        ("this", this.child.id()),
        ("other", that.child.id()),
    ];
    println!(
        "this build against {}, {backend}, interleaved; batches of {}",
        other.display(),
        if args.mix {
            "a mixed stream"
        } else {
            "deployments"
        }
    );
    println!(
        "{:>11} {:>8} {:>14} {:>14} {:>7}",
        "connections", "events", "this ev/s", "other ev/s", "ratio"
    );
    for &c in &args.load.connections {
        for n in [1, 100] {
            let (a, b) = interleave(
                (this.addr, &load(&key_a, &api_a, n)),
                (that.addr, &load(&key_b, &api_b, n)),
                c,
                args.load.seconds,
                &procs,
            )
            .await;
            let (ra, rb) = (a.outcome.rate(n), b.outcome.rate(n));
            println!(
                "{c:>11} {n:>8} {ra:>14.0} {rb:>14.0} {:>7.3}",
                ra / rb.max(1.0)
            );
        }
    }
    Ok(())
}

/// Runs the ingestion benchmark.
pub async fn run(args: Args) -> Result<()> {
    if let Some(dir) = &args.compare_bin_dir {
        compare(dir, &args, ("SQLite", &[], &[])).await?;
        if let Some(url) = &args.pg_url {
            let a = crate::procs::PgSchema::create(url).await?;
            let b = crate::procs::PgSchema::create(url).await?;
            let result = compare(dir, &args, ("PostgreSQL", &a.args, &b.args)).await;
            a.drop().await?;
            b.drop().await?;
            result?;
        }
        return Ok(());
    }
    bench_backend("SQLite", &[], &args).await?;
    if let Some(url) = &args.pg_url {
        let schema = crate::procs::PgSchema::create(url).await?;
        let result = bench_backend("PostgreSQL", &schema.args, &args).await;
        schema.drop().await?;
        result?;
    }
    Ok(())
}

/// Running totals of the server's group commits, from its `/metrics`.
struct CommitTotals {
    count: f64,
    requests: f64,
    seconds: f64,
}

async fn commit_totals(addr: std::net::SocketAddr) -> Result<CommitTotals> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(CommitTotals {
        count: value("storage_commit_batches_count "),
        requests: value("storage_commit_batches_sum "),
        seconds: value("storage_commit_duration_seconds_sum "),
    })
}
