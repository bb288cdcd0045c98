//! `cloud-bench`: a load generator for the Signals API. It starts a real `cloud serve` (the
//! binary next to this one) on SQLite and, with `--pg-url`, on PostgreSQL, and drives it with N
//! keep-alive HTTP/1.1 connections. For each backend it prints events/s, p50/p99 latency and
//! errors for `/livez` (no storage work: the machine's ceiling), single events, batches of 100,
//! and single events paced at half their peak rate; plus the server's peak RSS.
//!
//! ```text
//! cargo build --release -p cloud
//! target/release/cloud-bench --connections 32 --seconds 5 --pg-url postgres://postgres@127.0.0.1:5432/test
//! ```

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

#[derive(Debug, Parser)]
#[command(about = "Load generator for the Signals API")]
struct Args {
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Also measure on this PostgreSQL (a fresh schema is created and dropped).
    #[arg(long)]
    pg_url: Option<String>,
}

/// One kind of request to repeat.
#[derive(Clone)]
struct Load {
    method: hyper::Method,
    path: String,
    api_key: String,
    body: Bytes,
}

struct Outcome {
    requests: usize,
    errors: usize,
    latencies_us: Vec<u32>,
    elapsed: Duration,
}

async fn drive(
    addr: SocketAddr,
    load: Load,
    conns: usize,
    secs: u64,
    rate: Option<f64>,
) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let load = Arc::new(load);
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let load = load.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0;
                let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
                    return (lat, 1);
                };
                let _ = stream.set_nodelay(true);
                let Ok((mut sender, conn)) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
                else {
                    return (lat, 1);
                };
                tokio::spawn(conn);
                let interval = rate.map(|r| Duration::from_secs_f64(conns as f64 / r));
                let mut next = Instant::now();
                while Instant::now() < deadline {
                    if let Some(every) = interval {
                        tokio::time::sleep_until(next.into()).await;
                        next += every;
                    }
                    let req = Request::builder()
                        .method(load.method.clone())
                        .uri(&load.path)
                        .header("host", "bench")
                        .header("authorization", format!("Bearer {}", load.api_key))
                        .header("content-type", "application/json")
                        .body(Full::new(load.body.clone()))
                        .expect("request");
                    let t = Instant::now();
                    match sender.send_request(req).await {
                        Ok(res) => {
                            let ok = res.status().is_success();
                            let _ = res.into_body().collect().await;
                            if ok {
                                lat.push(t.elapsed().as_micros() as u32);
                            } else {
                                errors += 1;
                            }
                        }
                        Err(_) => {
                            errors += 1;
                            break;
                        }
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut out = Outcome {
        requests: 0,
        errors: 0,
        latencies_us: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for t in tasks {
        if let Ok((lat, errors)) = t.await {
            out.requests += lat.len();
            out.errors += errors;
            out.latencies_us.extend(lat);
        }
    }
    out.elapsed = started.elapsed();
    out.latencies_us.sort_unstable();
    out
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn report(label: &str, o: &Outcome, events_per_request: usize) -> f64 {
    let eps = (o.requests * events_per_request) as f64 / o.elapsed.as_secs_f64();
    println!(
        "{label:<34} {eps:>12.0} {:>9.2} {:>9.2} {:>7}",
        percentile(&o.latencies_us, 0.50),
        percentile(&o.latencies_us, 0.99),
        o.errors
    );
    eps
}

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cloud_bin() -> Result<std::path::PathBuf> {
    let me = std::env::current_exe()?;
    let bin = me.with_file_name("cloud");
    if !bin.exists() {
        bail!(
            "{} not found; run `cargo build --release -p cloud` first",
            bin.display()
        );
    }
    Ok(bin)
}

fn start(db: &[String]) -> Result<(Server, String, String)> {
    let dir = tempfile::tempdir()?;
    let mut storage = vec!["--data-dir".to_string(), dir.path().display().to_string()];
    storage.extend_from_slice(db);
    let admin = |args: &[&str]| -> Result<String> {
        let out = Command::new(cloud_bin()?)
            .args(args)
            .args(&storage)
            .output()?;
        if !out.status.success() {
            bail!("cloud {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    };
    admin(&["org", "create", "bench"])?;
    let signal_key = admin(&["signal-key", "create", "--org", "bench"])?;
    let api_key = admin(&["api-key", "create", "--org", "bench"])?;
    let mut child = Command::new(cloud_bin()?)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--signal-rate-limit", "0", "--log-level", "warn,cloud=info"])
        .args(&storage)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines.next().context("cloud exited before listening")??;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "listening" && v["scheme"] == "http" {
            break v["addr"].as_str().context("addr")?.parse()?;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok((
        Server {
            child,
            addr,
            _dir: dir,
        },
        signal_key,
        api_key,
    ))
}

fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn event(i: usize) -> serde_json::Value {
    serde_json::json!({
        "type": "deployment", "repository": "acme/api", "service": format!("svc-{}", i % 10),
        "version": "v1.2.3", "sha": "abc123def456", "environment": "production",
        "triggeredBy": "bench", "status": "success",
        "metadata": {"workflow": "deploy", "runId": i.to_string()}
    })
}

async fn bench_backend(name: &str, db: &[String], args: &Args) -> Result<()> {
    let (server, signal_key, api_key) = start(db)?;
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
    println!(
        "\n== {name}: {} connections, {} s each",
        args.connections, args.seconds
    );
    println!(
        "{:<34} {:>12} {:>9} {:>9} {:>7}",
        "load", "events/s", "p50 ms", "p99 ms", "errors"
    );
    let (c, s) = (args.connections, args.seconds);
    let ceiling = report(
        "GET /livez (no storage, ceiling)",
        &drive(server.addr, livez.clone(), c, s, None).await,
        1,
    );
    let peak = report(
        "POST single event",
        &drive(server.addr, single.clone(), c, s, None).await,
        1,
    );
    report(
        "POST batch of 100",
        &drive(server.addr, batch, c, s, None).await,
        100,
    );
    let half = peak / 2.0;
    report(
        &format!("POST single at {half:.0}/s (half peak)"),
        &drive(server.addr, single, c, s, Some(half)).await,
        1,
    );
    println!("single events / ceiling: {:.0}%", 100.0 * peak / ceiling);
    println!("server peak RSS: {:.1} MB", peak_rss_mb(server.child.id()));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    bench_backend("SQLite", &[], &args).await?;
    if let Some(url) = &args.pg_url {
        let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let pool = sqlx::PgPool::connect(url)
            .await
            .context("connect to --pg-url")?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&pool)
            .await?;
        let sep = if url.contains('?') { '&' } else { '?' };
        let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
        let result = bench_backend("PostgreSQL", &["--database-url".into(), scoped], &args).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&pool)
            .await?;
        result?;
    }
    Ok(())
}
