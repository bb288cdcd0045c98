//! `bench tunnel`: the same internal HTTP server (`bench upstream`, hyper, its own process)
//! reached directly and through `cloud` → TLS tunnel → `bridge`: requests/s with p50/p99, a
//! 1 GiB download, and the bridge's RSS idle and with 1,000 concurrent streams.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;

use crate::cpu;
use crate::load::{Load, LoadArgs, drive, interleave, percentile, report, report_head};
use crate::procs::{Server, sibling, start};
use crate::upstream::Upstream;

/// Options of `bench tunnel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Connections, seconds, cloud threads.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Bytes of the bulk download.
    #[arg(long, default_value_t = 1 << 30)]
    pub bulk_bytes: u64,
    /// Concurrent streams for the memory measurement.
    #[arg(long, default_value_t = 1000)]
    pub streams: usize,
}

struct BridgeProcess(Child);

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_bridge(
    cloud: &Server,
    token: &str,
    internal: SocketAddr,
    streams: usize,
) -> Result<BridgeProcess> {
    let yaml = format!(
        "name: dc1\napi_url: https://localhost:{}\ntls_ca_file: {}\nhealth_check_port: {}\nlog_level: warn\nmax_connections: {streams}\naudit_log: {}\napis:\n  - name: up\n    url: http://{internal}\n",
        cloud.tls_port,
        cloud.dir.path().join("ca.pem").display(),
        free_port()?,
        cloud.dir.path().join("audit.log").display(),
    );
    let path = cloud.dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml)?;
    let mut child = Command::new(sibling("bridge")?)
        .args(["run", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", token)
        .env("SERVICE_LOG_LEVEL", "info")
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    loop {
        let line = lines.next().context("bridge exited before connecting")??;
        if line.contains("Bridge connected successfully") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Ok(BridgeProcess(child))
}

fn rss_mb(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn get(addr: SocketAddr, path: &str, key: &str) -> Result<(u16, u64)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "bench")
        .header("authorization", format!("Bearer {key}"))
        .body(Empty::<Bytes>::new())?;
    let res = sender.send_request(req).await?;
    let status = res.status().as_u16();
    let mut body = res.into_body();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame?.data_ref() {
            n += d.len() as u64;
        }
    }
    Ok((status, n))
}

async fn bulk(addr: SocketAddr, path: &str, key: &str, bytes: u64) -> Result<f64> {
    let t = Instant::now();
    let (status, n) = get(addr, path, key).await?;
    if status != 200 || n != bytes {
        bail!("bulk download {path}: status {status}, {n} of {bytes} bytes");
    }
    Ok(bytes as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs the tunnel benchmark.
pub async fn run(args: Args) -> Result<()> {
    let upstream = Upstream::start()?;
    let internal_addr = upstream.addr;
    let (cloud, _, api_key) = start(&[], args.load.cloud_threads)?;
    let out = Command::new(sibling("cloud")?)
        .args([
            "bridge-token",
            "create",
            "--org",
            "bench",
            "--name",
            "dc1",
            "--data-dir",
        ])
        .arg(cloud.dir.path())
        .output()?;
    if !out.status.success() {
        bail!(
            "bridge-token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    let bridge = start_bridge(&cloud, &token, internal_addr, args.streams)?;
    let bridge_pid = bridge.0.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_mb(bridge_pid, "VmRSS:");

    let s = args.load.seconds;
    let direct = Load {
        method: hyper::Method::GET,
        path: "/hello".into(),
        api_key: api_key.clone(),
        body: Bytes::new(),
    };
    let tunneled = Load {
        path: "/v1/bridges/dc1/apis/up/hello".into(),
        ..direct.clone()
    };
    let procs = [
        ("client", std::process::id()),
        ("cloud", cloud.child.id()),
        ("bridge", bridge_pid),
        ("internal server", upstream.pid()),
    ];
    let mut ratios = Vec::new();
    for &c in &args.load.connections {
        println!(
            "\n== bridge tunnel: {c} connections; direct and tunnelled interleaved, {s} one-second slices each"
        );
        report_head("requests/s");
        let (d, t) = interleave(
            (internal_addr, &direct),
            (cloud.addr, &tunneled),
            c,
            s,
            &procs,
        )
        .await;
        let direct_rps = report("direct to the internal server", &d.outcome, 1);
        let tunnel_rps = report("cloud -> tunnel -> bridge", &t.outcome, 1);
        println!(
            "tunnel/direct requests/s: {:.0}%   added p50 latency at this load: {:.2} ms",
            100.0 * tunnel_rps / direct_rps,
            percentile(&t.outcome.latencies_us, 0.5) - percentile(&d.outcome.latencies_us, 0.5)
        );
        // The same figures as a CPU budget: what 40% of direct would allow, against what is spent.
        println!(
            "  direct: {}",
            d.ticks.per_request(d.outcome.requests).describe()
        );
        println!(
            "  tunnel: {}",
            t.ticks.per_request(t.outcome.requests).describe()
        );
        println!(
            "  40% of direct ({:.0}/s) allows {:.1} µs of CPU per request on {} cores, load generator included",
            0.4 * direct_rps,
            cpu::budget_us(0.4 * direct_rps),
            cpu::cores()
        );
        ratios.push((c, direct_rps, tunnel_rps));
    }
    println!(
        "\n{:>11} {:>10} {:>10} {:>7}",
        "connections", "direct/s", "tunnel/s", "ratio"
    );
    for (c, d, t) in &ratios {
        println!("{c:>11} {d:>10.0} {t:>10.0} {:>6.0}%", 100.0 * t / d);
    }
    // One request at a time: what the two hops add when nothing queues.
    let d1 = drive(internal_addr, direct.clone(), 1, s.min(3), None).await;
    report("direct, one connection", &d1, 1);
    let t1 = drive(cloud.addr, tunneled, 1, s.min(3), None).await;
    report("tunnel, one connection", &t1, 1);
    println!(
        "added p50 latency, one request at a time: {:.2} ms",
        percentile(&t1.latencies_us, 0.5) - percentile(&d1.latencies_us, 0.5)
    );

    // Loopback bulk speed swings run to run (page cache, CPU frequency, neighbours): the
    // median of three downloads each way, alternating, is what is compared.
    let b = args.bulk_bytes;
    let (mut direct_mbs, mut tunnel_mbs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        direct_mbs.push(bulk(internal_addr, &format!("/bulk?bytes={b}"), &api_key, b).await?);
        tunnel_mbs.push(
            bulk(
                cloud.addr,
                &format!("/v1/bridges/dc1/apis/up/bulk?bytes={b}"),
                &api_key,
                b,
            )
            .await?,
        );
    }
    let (direct_mbs, tunnel_mbs) = (median(&mut direct_mbs), median(&mut tunnel_mbs));
    println!(
        "bulk download of {} MiB (median of 3): direct {direct_mbs:.0} MB/s, through the tunnel {tunnel_mbs:.0} MB/s ({:.0}%)",
        b >> 20,
        100.0 * tunnel_mbs / direct_mbs
    );

    let path = "/v1/bridges/dc1/apis/up/slow?sleep_ms=3000".to_string();
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.streams)
        .map(|_| {
            let (path, key, addr) = (path.clone(), api_key.clone(), cloud.addr);
            tokio::spawn(async move {
                get(addr, &path, &key)
                    .await
                    .map(|r| r.0 == 200)
                    .unwrap_or(false)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let busy_rss = rss_mb(bridge_pid, "VmRSS:");
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap_or(false));
    }
    println!(
        "bridge RSS: idle {idle_rss:.1} MB; with {} concurrent streams {busy_rss:.1} MB (peak {:.1} MB); {ok}/{} streams succeeded in {:.1} s",
        args.streams,
        rss_mb(bridge_pid, "VmHWM:"),
        args.streams,
        started.elapsed().as_secs_f64()
    );
    drop(bridge);
    Ok(())
}
