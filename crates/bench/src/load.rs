//! The load generator: N keep-alive HTTP/1.1 connections repeating one request, closed-loop or
//! paced, recording each latency; two loads interleaved in short slices, so that a ratio of
//! two rates compares like with like on a VM whose speed drifts; and the report line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

use crate::cpu::{Meter, Ticks};

/// The options every benchmark shares.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Concurrent keep-alive connections for the request-rate runs; a comma-separated list
    /// runs the whole benchmark once per value (group commit and multiplexing gain with
    /// concurrency, so one value alone says little).
    #[arg(long, value_delimiter = ',', num_args = 1.., default_values_t = [64, 256])]
    pub connections: Vec<usize>,
    /// Seconds per request-rate run; a compared pair of loads gets this many one-second
    /// slices each, interleaved.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Async worker threads of `cloud` (TOKIO_WORKER_THREADS); default its own: one per core
    /// but one.
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
    // The clock starts once every connection is up (or has failed): with hundreds of
    // connections and one-second slices, connecting is not part of what is measured.
    let ready = Arc::new(tokio::sync::Barrier::new(conns + 1));
    let load = Arc::new(load);
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (load, ready) = (load.clone(), ready.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0;
                let connected = match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .ok()
                    }
                    Err(_) => None,
                };
                ready.wait().await;
                let Some((mut sender, conn)) = connected else {
                    return (lat, 1);
                };
                tokio::spawn(conn);
                let deadline = Instant::now() + Duration::from_secs(secs);
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
    ready.wait().await;
    let started = Instant::now();
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

impl Outcome {
    /// Requests per second (times `per_request` events each).
    pub fn rate(&self, per_request: usize) -> f64 {
        (self.requests * per_request) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn merge(&mut self, other: Outcome) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
        self.elapsed += other.elapsed;
    }
}

/// One side of an interleaved comparison: what it answered and what that cost.
pub struct Side {
    /// Requests, latencies, time.
    pub outcome: Outcome,
    /// CPU ticks of the measured processes during its slices.
    pub ticks: Ticks,
}

/// Runs `a` and `b` (address and load each) in alternating one-second slices, `slices` of
/// each, in the order ABBA ABBA …, so that a drift in the machine's speed (this VM's varies
/// by ±15% within minutes) weighs on both alike. Each side's CPU is counted over its own
/// slices for `procs`.
pub async fn interleave(
    a: (SocketAddr, &Load),
    b: (SocketAddr, &Load),
    conns: usize,
    slices: u64,
    procs: &[(&'static str, u32)],
) -> (Side, Side) {
    let empty = || Side {
        outcome: Outcome {
            requests: 0,
            errors: 0,
            latencies_us: Vec::new(),
            elapsed: Duration::ZERO,
        },
        ticks: Ticks::default(),
    };
    let (mut side_a, mut side_b) = (empty(), empty());
    for i in 0..slices {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let ((addr, load), side) = if which == 0 {
                (a, &mut side_a)
            } else {
                (b, &mut side_b)
            };
            let meter = Meter::start(procs);
            let run = drive(addr, load.clone(), conns, 1, None).await;
            side.ticks.add(&meter.stop());
            side.outcome.merge(run);
        }
    }
    side_a.outcome.latencies_us.sort_unstable();
    side_b.outcome.latencies_us.sort_unstable();
    (side_a, side_b)
}

/// The `p` quantile of sorted microseconds, in milliseconds.
pub fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Prints the head of a table of [`report`] lines, rates in `unit` (`events/s`, …).
pub fn report_head(unit: &str) {
    println!(
        "{:<34} {unit:>12} {:>9} {:>9} {:>7}",
        "load", "p50 ms", "p99 ms", "errors"
    );
}

/// Prints one line and returns events (or requests) per second.
pub fn report(label: &str, o: &Outcome, events_per_request: usize) -> f64 {
    let eps = o.rate(events_per_request);
    println!(
        "{label:<34} {eps:>12.0} {:>9.2} {:>9.2} {:>7}",
        percentile(&o.latencies_us, 0.50),
        percentile(&o.latencies_us, 0.99),
        o.errors
    );
    eps
}
