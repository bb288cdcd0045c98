//! What "several instances for redundancy" promises, with the real binaries: an instance that
//! dies mid-response loses no idempotent request, and a crowd of callers hanging up at once
//! does not take the tunnel down with them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use testkit::bridge::{Rig, internal_api_yaml};

/// `relay_retries_total{when}` from the cloud's `/metrics`, a series that exists from the
/// cloud's start (at 0) so that alert rules can rely on it.
async fn retries(rig: &Rig, when: &str) -> f64 {
    let text = rig.cloud.metrics_text().await;
    let series = format!("relay_retries_total{{when=\"{when}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series}in the cloud's /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_an_instance_mid_response_loses_no_request() {
    let mut rig = Rig::start("").await;
    let second = rig.another_instance().await;
    assert_eq!(retries(&rig, "before_response").await, 0.0);
    assert_eq!(retries(&rig, "mid_response").await, 0.0);
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    // 16 callers; each answer's head comes at once and its body 20 ms later, so at any moment
    // most requests on the killed instance are mid-response.
    for _ in 0..16 {
        let (client, url, key) = (
            rig.cloud.client(),
            rig.api_url("/item?body_delay_ms=20"),
            rig.tenant.api_key.clone(),
        );
        let (failures, done, stop) = (failures.clone(), done.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let outcome = match client.get(&url).bearer_auth(&key).send().await {
                    Ok(r) if r.status() == 200 => match r.text().await {
                        Ok(t) if t.ends_with("\"late\":true}") => Ok(()),
                        Ok(t) => Err(format!("200 with {t:?}")),
                        Err(e) => Err(format!("200, then the body failed: {e:?}")),
                    },
                    Ok(r) => Err(format!("{}: {:?}", r.status(), r.text().await)),
                    Err(e) => Err(format!("{e:?}")),
                };
                if let Err(why) = outcome {
                    eprintln!("failed: {why}");
                    failures.fetch_add(1, Ordering::SeqCst);
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    testkit::wait_until("requests before the kill", || {
        done.load(Ordering::SeqCst) >= 200
    })
    .await;
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let after_kill = done.load(Ordering::SeqCst);
    testkit::wait_until("requests after the kill", || {
        done.load(Ordering::SeqCst) >= after_kill + 400
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let retried = retries(&rig, "mid_response").await + retries(&rig, "before_response").await;
    let log = rig.cloud.log_text();
    let tunnel_lines: Vec<&str> = log.lines().filter(|l| l.contains("tunnel")).collect();
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "of {} requests ({retried} retried); the cloud said:\n{}",
        done.load(Ordering::SeqCst),
        tunnel_lines.join("\n")
    );
    // Requests were in flight on the killed instance, and were sent again to the other one.
    assert!(
        retries(&rig, "mid_response").await >= 1.0,
        "no answer was cut mid-response and retried: the test proved nothing"
    );
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_hanging_up_at_once_do_not_drop_the_tunnel() {
    let rig = Rig::start_with(|upstream| {
        format!("max_connections: 100\n{}", internal_api_yaml(upstream, ""))
    })
    .await;
    let key = rig.tenant.api_key.clone();
    // One HTTP/2 connection, as a proxy or a load balancer in front of the cloud would hold:
    // a caller that hangs up resets its stream at once, and the cloud then resets the
    // tunnel stream behind it.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for round in 0..10u64 {
        // 200 callers, who all hang up at the same moment, 1 to 9 ms after asking: some of
        // their tunnel streams are not yet accepted by the bridge, some already forwarded.
        let callers: Vec<_> = (0..200)
            .map(|_| {
                let (client, url, key) =
                    (h2.clone(), rig.api_url("/item?sleep_ms=1000"), key.clone());
                tokio::spawn(async move { client.get(&url).bearer_auth(&key).send().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1 + (round % 5) * 2)).await;
        for caller in &callers {
            caller.abort();
        }
        for caller in callers {
            let _ = caller.await;
        }
    }
    // The same tunnel serves the next requests, all of them.
    let mut ok = 0;
    for _ in 0..50 {
        if rig.get("/item").await.status() == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, 50);
    assert_eq!(
        rig.bridge
            .metric("service_bridge_reconnections_total")
            .await,
        0.0,
        "the tunnel dropped:\n{}",
        rig.bridge.log_text()
    );
    assert!(
        !rig.bridge.log_text().contains("reached limit"),
        "{}",
        rig.bridge.log_text()
    );
}
