//! The tunnel against its peers (one nginx hop; two nginx hops with TLS 1.3 between them) and
//! the backend reached directly, each driven by one `wrk -t1`, the load of the issue's
//! reference figures. The targets run in one-second slices interleaved A B C D, D C B A, … so
//! that the VM's drifting speed weighs on all alike, as `load::interleave` does for two.
//! Each target's processes are metered during its own slices ([`crate::cpu`]): the CPU each
//! spends per request and how much of the machine stayed idle say why one is faster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cpu::{Meter, Ticks, Usage};

/// One thing to load.
pub struct Target {
    /// Its row in the report.
    pub label: String,
    /// Its column in the summary.
    pub short: &'static str,
    pub addr: SocketAddr,
    pub path: String,
    /// The Authorization header the client sends, if any.
    pub auth: Option<String>,
    /// The processes that serve it (the load generator aside), metered during its slices.
    pub procs: Vec<(&'static str, u32)>,
}

/// What one target did over its slices.
pub struct Row {
    pub label: String,
    pub short: &'static str,
    /// Mean of the slices' successful (2xx/3xx) requests/s (equal one-second slices: total
    /// over total).
    pub rps: f64,
    /// Medians of the slices' p50 and p99, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Non-2xx answers and socket errors, all slices.
    pub errors: u64,
    /// CPU of its processes per successful request, and the machine's idle share, over all
    /// its slices.
    pub usage: Usage,
}

/// One `wrk` run, as parsed, and what the target's processes spent during it.
struct Run {
    rps: f64,
    /// Successful requests.
    ok: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    ticks: Ticks,
}

fn wrk_bin() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("wrk"))
        .find(|p| p.is_file());
    found.context("wrk not found (it drives the peer comparison): apt-get install wrk")
}

/// wrk's durations: `812.00us`, `1.20ms`, `2.00s`, `1.00m`.
fn millis(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(n * scale)
}

/// `wrk -t1 -c conns -d 1s --latency` against `t`.
fn wrk(bin: &PathBuf, t: &Target, conns: usize) -> Result<Run> {
    let mut cmd = Command::new(bin);
    cmd.args(["-t1", "-c", &conns.to_string(), "-d", "1s", "--latency"]);
    if let Some(auth) = &t.auth {
        cmd.args(["-H", &format!("Authorization: {auth}")]);
    }
    let meter = Meter::start(&t.procs);
    let out = cmd
        .arg(format!("http://{}{}", t.addr, t.path))
        .output()
        .context("running wrk")?;
    let ticks = meter.stop();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk against {}: {text}{}",
            t.label,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let all_rps: f64 = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no Requests/sec in wrk's output: {text}"))?;
    // `123456 requests in 1.00s, 150.00MB read`
    let requests: f64 = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no request count in wrk's output: {text}"))?;
    let latency = |p: &str| field(p).and_then(millis).unwrap_or(f64::NAN);
    let mut errors: u64 = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // `Socket errors: connect 0, read 0, write 0, timeout 0`
    if let Some(s) = field("Socket errors:") {
        errors += s
            .split(',')
            .filter_map(|kv| kv.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    // wrk's rate counts every answer: a fast 503 would pass for throughput.
    let non_2xx: f64 = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let rps = all_rps * (1.0 - non_2xx / requests.max(1.0));
    Ok(Run {
        rps,
        ok: requests - non_2xx,
        p50_ms: latency("50%"),
        p99_ms: latency("99%"),
        errors,
        ticks,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs every target for `slices` one-second slices at `conns` connections, interleaved.
pub fn compare(targets: &[Target], conns: usize, slices: u64) -> Result<Vec<Row>> {
    let bin = wrk_bin()?;
    let mut runs: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for i in 0..slices {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if i % 2 == 1 {
            order.reverse();
        }
        for k in order {
            runs[k].push(wrk(&bin, &targets[k], conns)?);
        }
    }
    Ok(targets
        .iter()
        .zip(runs)
        .map(|(t, r)| {
            let mut ticks = Ticks::default();
            r.iter().for_each(|run| ticks.add(&run.ticks));
            let ok: f64 = r.iter().map(|r| r.ok).sum();
            Row {
                label: t.label.clone(),
                short: t.short,
                rps: r.iter().map(|r| r.rps).sum::<f64>() / r.len().max(1) as f64,
                p50_ms: median(r.iter().map(|r| r.p50_ms).collect()),
                p99_ms: median(r.iter().map(|r| r.p99_ms).collect()),
                errors: r.iter().map(|r| r.errors).sum(),
                usage: ticks.per_request(ok as usize),
            }
        })
        .collect())
}

/// Prints the rows, each as a share of the first (direct), each followed by its CPU line.
pub fn print(rows: &[Row]) {
    println!(
        "{:<40} {:>11} {:>9} {:>8} {:>8} {:>7}",
        "wrk -t1 against", "requests/s", "of direct", "p50 ms", "p99 ms", "errors"
    );
    let direct = rows.first().map_or(f64::NAN, |r| r.rps);
    for r in rows {
        println!(
            "{:<40} {:>11.0} {:>8.0}% {:>8.2} {:>8.2} {:>7}",
            r.label,
            r.rps,
            100.0 * r.rps / direct,
            r.p50_ms,
            r.p99_ms,
            r.errors
        );
        println!("    {}", r.usage.describe());
    }
}

/// Prints one line per connection count: each target's requests/s and share of direct, and
/// the ratio of the second target (this build's tunnel) to the one labelled `old tunnel`
/// (another build's), if any.
pub fn print_summary(runs: &[(usize, Vec<Row>)]) {
    let Some((_, first)) = runs.first() else {
        return;
    };
    let mut head = format!("{:>11}", "connections");
    for r in first {
        head += &format!(" {:>17}", r.short);
    }
    let old = first.iter().position(|r| r.short == "old tunnel");
    if old.is_some() {
        head += &format!(" {:>8}", "new/old");
    }
    println!("{head}");
    for (c, rows) in runs {
        let direct = rows[0].rps;
        let mut line = format!("{c:>11}");
        for r in rows {
            line += &format!(" {:>10.0} ({:>3.0}%)", r.rps, 100.0 * r.rps / direct);
        }
        if let Some(old) = old.and_then(|i| rows.get(i)) {
            line += &format!(" {:>8.3}", rows[1].rps / old.rps);
        }
        println!("{line}");
    }
}
