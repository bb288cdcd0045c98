//! `bench tunnel`: the same internal HTTP server (`bench upstream`, hyper, its own process)
//! reached directly and through `cloud` → TLS tunnel → `bridge`: requests/s with p50/p99, a
//! 1 GiB download, and the bridge's RSS idle and with 1,000 concurrent streams. Then the
//! tunnel against its peers (nginx hops, see `nginx.rs`) in front of an nginx backend, driven
//! by `wrk -t1`, and optionally against the `cloud` + `bridge` of another build.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;

use crate::cpu;
use crate::load::{Load, LoadArgs, drive, interleave, percentile, report, report_head};
use crate::nginx::{self, Peers};
use crate::peers::{self, Target};
use crate::procs::{Server, bridge_token, start, start_bridge, start_from, status_mb};
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
    /// A directory with the `cloud` and `bridge` of another build (e.g. the previous main):
    /// its tunnel joins the interleaved peer comparison as `tunnel (DIR)`.
    #[arg(long)]
    pub compare_bin_dir: Option<PathBuf>,
    /// Idle keep-alive connections each nginx hop keeps to its upstream (`keepalive`); 64 as in
    /// the reference setup. Beyond it, a hop closes connections as requests finish
    /// and opens new ones (TLS handshakes included, between the two hops).
    #[arg(long, default_value_t = 64)]
    pub nginx_keepalive: usize,
    /// Only the comparison with the peers (and `--compare-bin-dir`): no `bench upstream` rows,
    /// bulk download or stream count.
    #[arg(long)]
    pub peers_only: bool,
    /// Also measure this build with N instances (processes) of the bridge on this machine, as
    /// one more row beside the peers: the cloud spreads the callers over them. 1: no such row.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub bridge_instances: u8,
}

/// The bridge's `apis` entry for the peers' nginx backend (Basic credentials injected).
fn json_api(backend: SocketAddr) -> String {
    format!(
        "  - name: json\n    url: http://{backend}\n    auth: {{type: basic, username: {}, password: {}}}\n",
        nginx::USER,
        nginx::PASSWORD
    )
}

/// A `cloud` and its bridge's instances, from this build or another. The instances are stopped
/// first (fields drop in order), so that they do not log a lost tunnel.
struct Pipeline {
    bridges: Vec<crate::procs::Bridge>,
    cloud: Server,
    api_key: String,
}

/// Starts a cloud from `bin_dir` (None: next to this binary) and `instances` instances of a
/// bridge with `apis`.
fn pipeline(
    bin_dir: Option<&std::path::Path>,
    threads: Option<usize>,
    apis: &str,
    streams: usize,
    instances: u8,
) -> Result<Pipeline> {
    let (cloud, _, api_key) = match bin_dir {
        Some(dir) => start_from(dir, &[], threads)?,
        None => start(&[], threads)?,
    };
    let token = bridge_token(&cloud)?;
    let bridges = (0..instances)
        .map(|_| start_bridge(&cloud, &token, &format!("apis:\n{apis}"), streams))
        .collect::<Result<Vec<_>>>()?;
    // The backend must answer through this tunnel before anything is measured.
    let (status, bytes) = nginx::probe(
        cloud.addr,
        "/v1/bridges/dc1/apis/json/",
        Some(&format!("Bearer {api_key}")),
    )?;
    if status != 200 || bytes != 1024 {
        bail!(
            "the tunnel of {} to the nginx backend answered {status} with {bytes} bytes",
            cloud.bin_dir.display()
        );
    }
    Ok(Pipeline {
        cloud,
        api_key,
        bridges,
    })
}

fn rss_mb(pid: u32, field: &str) -> f64 {
    status_mb(pid, field)
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
    let nginx = Peers::start(args.nginx_keepalive)?;
    let apis = format!(
        "  - name: up\n    url: http://{internal_addr}\n{}",
        json_api(nginx.backend.addr)
    );
    let threads = args.load.cloud_threads;
    let this = pipeline(None, threads, &apis, args.streams, 1)?;
    let other = match &args.compare_bin_dir {
        Some(dir) => {
            let apis = json_api(nginx.backend.addr);
            Some(pipeline(Some(dir), threads, &apis, args.streams, 1)?)
        }
        None => None,
    };
    let spread = match args.bridge_instances {
        1 => None,
        n => {
            let apis = json_api(nginx.backend.addr);
            Some(pipeline(None, threads, &apis, args.streams, n)?)
        }
    };
    let (cloud, api_key) = (&this.cloud, this.api_key.clone());
    let bridge_pid = this.bridges[0].pid();
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
    let backend = ("backend", nginx.backend.worker_pid());
    let tunnel_procs = |p: &Pipeline| {
        let names = ["bridge", "bridge 2", "bridge 3", "bridge 4"];
        let mut procs = vec![("cloud", p.cloud.child.id())];
        procs.extend(names.into_iter().zip(p.bridges.iter().map(|b| b.pid())));
        procs.push(backend);
        procs
    };
    let mut targets = vec![
        Target {
            label: "direct to nginx (client sends Basic)".into(),
            short: "direct",
            addr: nginx.backend.addr,
            path: "/".into(),
            auth: Some(nginx::basic()),
            procs: vec![backend],
        },
        Target {
            label: "cloud -> tunnel -> bridge".into(),
            short: "tunnel",
            addr: cloud.addr,
            path: "/v1/bridges/dc1/apis/json/".into(),
            auth: Some(format!("Bearer {api_key}")),
            procs: tunnel_procs(&this),
        },
        Target {
            label: "one nginx hop".into(),
            short: "one hop",
            addr: nginx.one_hop.addr,
            path: "/".into(),
            auth: None,
            procs: vec![("hop", nginx.one_hop.worker_pid()), backend],
        },
        Target {
            label: "two nginx hops, TLS 1.3 between".into(),
            short: "two hops (TLS)",
            addr: nginx.two_hops.addr,
            path: "/".into(),
            auth: None,
            procs: vec![
                ("hop 1", nginx.two_hops.worker_pid()),
                ("hop 2", nginx.hop2.worker_pid()),
                backend,
            ],
        },
    ];
    if let Some(o) = &other {
        targets.push(Target {
            label: format!("tunnel ({})", o.cloud.bin_dir.display()),
            short: "old tunnel",
            addr: o.cloud.addr,
            path: "/v1/bridges/dc1/apis/json/".into(),
            auth: Some(format!("Bearer {}", o.api_key)),
            procs: tunnel_procs(o),
        });
    }
    if let Some(p) = &spread {
        targets.push(Target {
            label: format!("tunnel, {} bridge instances", p.bridges.len()),
            short: "instances",
            addr: p.cloud.addr,
            path: "/v1/bridges/dc1/apis/json/".into(),
            auth: Some(format!("Bearer {}", p.api_key)),
            procs: tunnel_procs(p),
        });
    }
    let mut peer_rows = Vec::new();
    let procs = [
        ("client", std::process::id()),
        ("cloud", cloud.child.id()),
        ("bridge", bridge_pid),
        ("internal server", upstream.pid()),
    ];
    let mut ratios = Vec::new();
    for &c in &args.load.connections {
        if !args.peers_only {
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
            "\n== peers: {c} connections; nginx backend (1 KB JSON, Basic auth); one wrk -t1 per slice, {s} one-second slices each, interleaved"
        );
        let rows = peers::compare(&targets, c, s)?;
        peers::print(&rows);
        peer_rows.push((c, rows));
    }
    if !ratios.is_empty() {
        println!(
            "\n{:>11} {:>10} {:>10} {:>7}",
            "connections", "direct/s", "tunnel/s", "ratio"
        );
    }
    for (c, d, t) in &ratios {
        println!("{c:>11} {d:>10.0} {t:>10.0} {:>6.0}%", 100.0 * t / d);
    }
    println!("\npeers: requests/s (share of direct to the nginx backend), wrk -t1, interleaved");
    peers::print_summary(&peer_rows);
    if let Some(o) = &other {
        println!(
            "(old tunnel: {}; new/old: this build's tunnel / it)",
            o.cloud.bin_dir.display()
        );
    }
    if let Some(p) = &spread {
        println!(
            "(instances: this build with {} bridge instances on this machine)",
            p.bridges.len()
        );
    }
    if args.peers_only {
        return Ok(());
    }
    // The other pipelines' processes would only add noise from here on.
    drop(other);
    drop(spread);
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
    drop(this);
    drop(nginx);
    Ok(())
}
