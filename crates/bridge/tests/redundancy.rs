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

/// `POST /item` with a body through the tunnel; its status and `Retry-After`.
async fn post(rig: &Rig) -> (u16, Option<String>) {
    let res = rig
        .request(reqwest::Method::POST, "/item")
        .body("{\"n\":1}")
        .send()
        .await
        .expect("request");
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (res.status().as_u16(), retry_after)
}

/// Waits until the upstream serves at least `n` requests at once.
async fn in_flight(rig: &Rig, n: usize) {
    testkit::wait_until("slow requests at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) >= n
    })
    .await;
}

/// A SIGTERM'd instance finishes what it has and takes nothing new: requests of any method go
/// to the other instance, and with none left the caller hears 503 and when to retry, never a
/// 502 for a request that did not leave the cloud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_instance_hands_new_requests_to_the_other() {
    let mut rig = Rig::start("").await;
    let mut second = rig.another_instance().await;
    let slow = |rig: &Rig| {
        let request = rig.request(reqwest::Method::GET, "/slow?sleep_ms=3000");
        tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
    };
    // One slow request on each instance (the cloud picks the least busy), so that the first
    // is still draining while the POSTs below are sent.
    let (a, b) = (slow(&rig), slow(&rig));
    in_flight(&rig, 2).await;
    rig.bridge.signal("TERM");
    testkit::wait_until("the first instance draining", || {
        rig.bridge
            .log_text()
            .contains("shutdown: finishing in-flight streams")
    })
    .await;
    // Its health says so while it finishes (and no more than that: it is still alive): set a
    // moment after that line.
    testkit::wait_until_async("/health saying draining", || async {
        rig.bridge.health().await.is_some_and(|(code, health)| {
            assert_eq!(code, 200, "{health}");
            health["draining"] == true
        })
    })
    .await;
    let (_, other) = second.health().await.unwrap();
    assert_eq!(other["draining"], false, "{other}");
    for _ in 0..10 {
        assert_eq!(post(&rig).await, (200, None));
    }
    assert!(retries(&rig, "draining").await <= 1.0);
    assert_eq!(
        (a.await.unwrap().unwrap(), b.await.unwrap().unwrap()),
        (200, 200)
    );
    assert_eq!(rig.bridge.wait(), Some(0));

    // The last instance stopping: its in-flight request finishes, a new one is a 503.
    let c = slow(&rig);
    in_flight(&rig, 1).await;
    second.signal("TERM");
    testkit::wait_until("the second instance draining", || {
        second
            .log_text()
            .contains("shutdown: finishing in-flight streams")
    })
    .await;
    // That line comes just before the bridge's GOAWAY: a POST that reaches it first is still
    // served; after it, one is a 503, never a 502.
    testkit::wait_until_async("a 503 while the last instance drains", || async {
        let answer = post(&rig).await;
        assert!(
            answer == (200, None) || answer == (503, Some("5".to_string())),
            "{answer:?}"
        );
        answer.0 == 503
    })
    .await;
    assert_eq!(c.await.unwrap().unwrap(), 200);
    assert_eq!(second.wait(), Some(0));
}

/// Two processes under one name that declare different resources (a rollout, or a name given to
/// two sites' bridges by mistake): the cloud says so, and sends each request only to an
/// instance that declares its resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_declaring_different_resources_are_told_apart() {
    let rig = Rig::start("").await;
    let yaml = testkit::bridge::yaml_for(
        &rig.cloud,
        "dc1",
        &format!("apis:\n  - name: other\n    url: {}\n", rig.upstream.url),
    );
    let other = testkit::bridge::BridgeProc::start(&yaml, &[("SERVICE_BRIDGE_TOKEN", &rig.token)]);
    other
        .wait_status("connected", Duration::from_secs(20))
        .await;
    let said = rig
        .cloud
        .wait_log_line("instances of this bridge declare different resources");
    assert!(
        said.contains("api/internal") && said.contains("api/other"),
        "{said}"
    );
    // Every request for `internal` reaches the instance that declares it (the other would
    // refuse it with 404).
    for _ in 0..10 {
        assert_eq!(rig.get("/item").await.status(), 200);
    }
    let other_url = format!("{}/v1/bridges/dc1/apis/other/item", rig.cloud.http);
    let get_other = || {
        rig.cloud
            .client()
            .get(&other_url)
            .bearer_auth(&rig.tenant.api_key)
            .send()
    };
    assert_eq!(get_other().await.unwrap().status(), 200);
    // The only instance that declares `other` restarts (a rollout): while it is away, its
    // resource is one to retry (503), not one the bridge does not have (404).
    let mut other = other;
    other.signal("TERM");
    assert_eq!(other.wait(), Some(0));
    rig.cloud.wait_log_line("bridge disconnected");
    let res = get_other().await.unwrap();
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("retry-after"));
    let problem: serde_json::Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("less than a minute ago"),
        "{problem}"
    );
    // A resource no instance ever declared is still a 404.
    let res = rig
        .cloud
        .client()
        .get(format!("{}/v1/bridges/dc1/apis/never/item", rig.cloud.http))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}
