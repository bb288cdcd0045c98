//! `bench dashboard`: the dashboard's pages over a month-old org with a million events
//! (SQLite). The events go in through the Signals API in batches, spread over 30 days and 40
//! services; then one signed-in client asks for each page in turn and the latency of each
//! answer (loopback HTTP included, so an upper bound of the server's time) gives p50 and p99.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::load::percentile;
use crate::procs;

/// Options of `bench dashboard`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Events to store first.
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    /// Requests per page measured.
    #[arg(long, default_value_t = 300)]
    requests: usize,
}

const DAYS: i64 = 30;
const SERVICES: usize = 40;

/// The `i`-th of `n` events: a deterministic mix of types, services and environments, at a
/// time that moves from 30 days ago to now.
fn event(i: usize, n: usize, now: i64) -> Value {
    let at = now - DAYS * 86_400_000 + (i as i64 * DAYS * 86_400_000) / n as i64;
    let when = chrono_like(at);
    let service = format!("svc-{:02}", (i * 7) % SERVICES);
    let environment = ["production", "staging", "dev"][i % 3];
    match i % 10 {
        0 => json!({"type": "deployment", "service": service, "environment": environment,
                    "version": format!("v1.{}.{}", i / 1000, i % 1000), "status": "success", "timestamp": when}),
        1..=4 => json!({"type": "alert", "service": service, "environment": environment,
                        "status": "firing", "severity": "warning", "title": "Latency above SLO",
                        "dedupKey": format!("lat-{}", i % 500), "timestamp": when}),
        5 | 6 => json!({"type": "change", "service": service, "environment": environment,
                        "summary": "feature flag toggled", "timestamp": when}),
        _ => json!({"type": "custom", "service": service, "environment": environment,
                    "name": "cache.flush", "timestamp": when}),
    }
}

/// RFC 3339 (UTC, milliseconds) of a Unix time in milliseconds.
fn chrono_like(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Latencies (µs) of `requests` sequential GETs of `url`.
pub async fn measure(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    requests: usize,
) -> Result<Vec<u32>> {
    let mut times = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let res = client.get(url).header("cookie", session).send().await?;
        let status = res.status();
        let body = res.bytes().await?;
        if status != 200 {
            bail!(
                "{url} answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        times.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
    }
    times.sort_unstable();
    Ok(times)
}

/// Runs the benchmark.
pub async fn run(args: Args) -> Result<()> {
    let (server, signal_key, api_key) = procs::start(&[], None)?;
    let base = format!("http://{}", server.addr);
    testkit::install_crypto();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let n = args.events;
    crate::fill::post_all(
        &client,
        &format!("{base}/v1/signals/{signal_key}"),
        &api_key,
        (n, crate::fill::BATCH),
        |i| event(i, n, now),
    )
    .await?;
    let out = std::process::Command::new(procs::sibling("cloud")?)
        .args([
            "user",
            "create",
            "--org",
            "bench",
            "--email",
            "bench@example.com",
        ])
        .args(["--role", "member", "--public-url", &base])
        .args(["--data-dir", &server.dir.path().display().to_string()])
        .output()?;
    if !out.status.success() {
        bail!(
            "cloud user create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let link = String::from_utf8(out.stdout)?.trim().to_string();
    let (_, session) = testkit::dashboard::set_password(&client, &link).await;

    let middle_day = chrono_like(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64
            - 15 * 86_400_000,
    )[..10]
        .to_string();
    // The keyset position of a page in the middle of the month, from the newest page's link
    // followed 200 times would be slow to reach: take it from a day-filtered page instead.
    let day_page = client
        .get(format!("{base}/events?from={middle_day}&to={middle_day}"))
        .header("cookie", &session)
        .send()
        .await?
        .text()
        .await?;
    let deep = day_page
        .split("href=\"/events?")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .context("no 'Older events' link on a day's page")?
        .replace("&amp;", "&")
        .replace(&format!("from={middle_day}&to={middle_day}"), "from=&to=");
    let pages = [
        ("timeline, newest page", "/events".to_string()),
        ("timeline, type=alert", "/events?type=alert".into()),
        ("timeline, service=svc-07", "/events?service=svc-07".into()),
        (
            "timeline, environment=staging",
            "/events?environment=staging".into(),
        ),
        (
            "timeline, one day 15 days ago",
            format!("/events?from={middle_day}&to={middle_day}"),
        ),
        ("timeline, a page 15 days deep", format!("/events?{deep}")),
        ("services (last deployments)", "/services".into()),
    ];
    println!(
        "{} events over {DAYS} days (SQLite), {} sequential requests per page, latency seen by the client on loopback",
        args.events, args.requests
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9}",
        "page", "p50 ms", "p99 ms", "max ms"
    );
    for (name, path) in pages {
        let times = measure(&client, &format!("{base}{path}"), &session, args.requests).await?;
        println!(
            "{name:<34} {:>9.2} {:>9.2} {:>9.2}",
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            percentile(&times, 1.0)
        );
    }
    drop(server);
    Ok(())
}
