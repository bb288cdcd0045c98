//! `bench correlate`: the suspects of one alert in an org with 100,000 deployments and 100,000
//! alerts over 30 days (40 services, 3 environments), on SQLite and, with `--pg-url`,
//! PostgreSQL. Sequential requests for alerts picked at random; latency seen by the client on
//! loopback, so an upper bound of the server's time.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use rand::Rng;
use serde_json::{Value, json};

use crate::load::percentile;
use crate::procs;

/// Options of `bench correlate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Deployments, and as many alerts.
    #[arg(long, default_value_t = 100_000)]
    each: usize,
    /// Events per request while filling: 1 stores deployments one per request, as deploy tools
    /// send them, so each group commit holds a few (the most rows of `change_hours`).
    #[arg(long, default_value_t = crate::fill::BATCH)]
    batch: usize,
    /// Requests measured.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// Also measure on this PostgreSQL (a fresh schema is created and dropped).
    #[arg(long)]
    pg_url: Option<String>,
}

const SERVICES: usize = 40;
const DAY_MS: i64 = 86_400_000;

/// Event `i` of `n`: deployments and alerts alternate, over 30 days ending now.
fn event(i: usize, n: usize, now: i64) -> Value {
    let at = now - 30 * DAY_MS + (i as i64 * 30 * DAY_MS) / n as i64;
    let when = chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let service = format!("svc-{:02}", (i / 2 * 7) % SERVICES);
    let environment = ["production", "staging", "dev"][(i / 2) % 3];
    if i.is_multiple_of(2) {
        json!({"type": "deployment", "service": service, "environment": environment,
               "version": format!("v{}", i / 2), "status": "success", "repository": "acme/mono",
               "timestamp": when})
    } else {
        json!({"type": "alert", "service": service, "environment": environment,
               "status": "triggered", "severity": "error", "title": format!("SLO burn {}", i % 97),
               "dedupKey": format!("slo-{}", i % 500), "timestamp": when})
    }
}

async fn backend(name: &str, db: &[String], args: &Args) -> Result<()> {
    let (server, signal_key, api_key) = procs::start(db, None)?;
    let base = format!("http://{}", server.addr);
    testkit::install_crypto();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let n = args.each * 2;
    let ids = crate::fill::post_all(
        &client,
        &format!("{base}/v1/signals/{signal_key}"),
        &api_key,
        (n, args.batch),
        |i| event(i, n, now),
    )
    .await?;
    let alerts: Vec<&String> = ids.iter().skip(1).step_by(2).collect();
    let mut rng = rand::rng();
    let mut times = Vec::with_capacity(args.requests);
    let mut suspects = 0;
    for _ in 0..args.requests {
        let id = alerts[rng.random_range(0..alerts.len())];
        let started = Instant::now();
        let res = client
            .get(format!("{base}/v1/alerts/{id}/suspects"))
            .bearer_auth(&api_key)
            .send()
            .await?;
        let status = res.status();
        let body: Value = res.json().await?;
        if status != 200 {
            bail!("suspects answered {status}: {body}");
        }
        times.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        suspects += body["suspects"].as_array().map_or(0, Vec::len);
    }
    times.sort_unstable();
    println!(
        "{name:<11} {:>9} {:>9} {:>9} {:>9} {:>9.1}",
        args.each,
        args.requests,
        format!("{:.2}", percentile(&times, 0.5)),
        format!("{:.2}", percentile(&times, 0.99)),
        suspects as f64 / args.requests as f64
    );
    drop(server);
    Ok(())
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    println!(
        "{:<11} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "backend", "each", "requests", "p50 ms", "p99 ms", "suspects"
    );
    backend("SQLite", &[], &args).await?;
    if let Some(url) = &args.pg_url {
        let schema = crate::procs::PgSchema::create(url).await?;
        let result = backend("PostgreSQL", &schema.args, &args).await;
        schema.drop().await?;
        result?;
    }
    Ok(())
}
