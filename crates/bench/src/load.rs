//! The load generator: N keep-alive HTTP/1.1 connections repeating one request, closed-loop or
//! paced, recording each latency; and the report line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

/// The options every benchmark shares.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Concurrent keep-alive connections for the request-rate runs.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Seconds per request-rate run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Async worker threads of `cloud` (TOKIO_WORKER_THREADS); default one per core.
    #[arg(long)]
    pub cloud_threads: Option<usize>,
}

/// One kind of request to repeat.
#[derive(Clone)]
pub struct Load {
    pub method: hyper::Method,
    pub path: String,
    pub api_key: String,
    pub body: Bytes,
}

pub struct Outcome {
    pub requests: usize,
    pub errors: usize,
    pub latencies_us: Vec<u32>,
    pub elapsed: Duration,
}

/// Runs `load` over `conns` connections for `secs` seconds (paced to `rate` req/s if given).
pub async fn drive(
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

/// The `p` quantile of sorted microseconds, in milliseconds.
pub fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Prints one line and returns events (or requests) per second.
pub fn report(label: &str, o: &Outcome, events_per_request: usize) -> f64 {
    let eps = (o.requests * events_per_request) as f64 / o.elapsed.as_secs_f64();
    println!(
        "{label:<34} {eps:>12.0} {:>9.2} {:>9.2} {:>7}",
        percentile(&o.latencies_us, 0.50),
        percentile(&o.latencies_us, 0.99),
        o.errors
    );
    eps
}
