//! Reconnection, heartbeats, several instances and draining, with the real binaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use testkit::bridge::{Rig, internal_api_yaml, yaml_for};
use testkit::freeze::FreezingRelay;
use testkit::{Backend, Cloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_reconnects_by_itself_when_the_cloud_restarts() {
    let mut rig = Rig::start("").await;
    assert_eq!(rig.get("/before").await.status(), 200);
    rig.cloud.kill_and_restart();
    rig.bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    // The new cloud process has the tunnel again.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rig.get("/after").await.status() != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "no traffic after reconnect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The log says why the tunnel went, not only that it did.
    let lost = (rig.bridge.log_json().into_iter())
        .find(|l| l["message"] == "tunnel lost; reconnecting")
        .expect("a line saying the tunnel was lost");
    assert!(
        lost["cause"].as_str().is_some_and(|c| !c.is_empty()),
        "{lost}"
    );
    assert!(
        rig.bridge
            .metric("service_bridge_reconnections_total")
            .await
            >= 1.0
    );
    assert_eq!(
        rig.bridge
            .metric("service_bridge_connected{name=\"dc1\"}")
            .await,
        1.0
    );
}

/// The cloud's CA rotated as docs/operations.md says (stop, delete the `ca` row and the CA
/// files, start): the connected bridge's enrolled certificate is refused in TLS, and the
/// bridge drops it and enrolls again with its token, by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_enrolls_again_once_the_cloud_s_ca_is_rotated() {
    let mut rig = Rig::start("").await;
    assert_eq!(rig.get("/before").await.status(), 200);
    rig.cloud.signal("TERM");
    assert_eq!(rig.cloud.wait(), Some(0));
    rig.bridge
        .wait_status("reconnecting", Duration::from_secs(10))
        .await;
    rig.cloud.exec_sql("DELETE FROM ca");
    let dir = rig.cloud.data_dir.path().to_path_buf();
    std::fs::remove_file(dir.join("ca.pem")).unwrap();
    std::fs::remove_file(dir.join("ca-key.pem")).unwrap();
    rig.cloud.launch();
    rig.bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    assert_eq!(rig.get("/after").await.status(), 200);
    let log = rig.bridge.log_text();
    assert!(
        log.contains("DecryptError") || log.contains("alert"),
        "{log}"
    );
    assert!(log.contains("enrolling again"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_connection_is_detected_by_heartbeats() {
    let cloud = Cloud::start(Backend::Sqlite);
    let tenant = cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let relay =
        FreezingRelay::start(format!("127.0.0.1:{}", cloud.tls_port()).parse().unwrap()).await;
    let upstream = testkit::upstream::Upstream::start().await;
    let yaml = yaml_for(&cloud, "dc1", &internal_api_yaml(&upstream, "")).replace(
        &format!("localhost:{}", cloud.tls_port()),
        &format!("localhost:{}", relay.addr.port()),
    );
    let bridge = testkit::bridge::start_connected(&yaml, &token).await;
    relay.freeze(true);
    // heartbeat_interval is 1 s: three missed beats, plus slack.
    bridge
        .wait_status("reconnecting", Duration::from_secs(8))
        .await;
    let (code, health) = bridge.health().await.unwrap();
    assert_eq!(code, 503, "{health}");
    assert_eq!(health["status"], "unhealthy");
    // The cloud notices too (its heartbeats go unanswered) and drops the instance.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list = cloud.get_json(&tenant.api_key, "/v1/bridges").await;
        if list["bridges"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cloud kept the dead tunnel: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.freeze(false);
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
}

/// A frozen instance (`SIGSTOP`: its connection stays open, nothing answers) is dropped by the
/// cloud's pings within about 30 s, not after three heartbeats of 30 s (two minutes, while the
/// requests sent to it waited and new ones kept coming).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_instance_is_dropped_within_half_a_minute() {
    let cloud = Cloud::start(Backend::Sqlite);
    let tenant = cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let upstream = testkit::upstream::Upstream::start().await;
    let yaml = yaml_for(&cloud, "dc1", &internal_api_yaml(&upstream, ""))
        .replace("heartbeat_interval: 1\n", "heartbeat_interval: 30\n");
    let bridge = testkit::bridge::start_connected(&yaml, &token).await;
    bridge.signal("STOP");
    let frozen = std::time::Instant::now();
    loop {
        let list = cloud.get_json(&tenant.api_key, "/v1/bridges").await;
        if list["bridges"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            frozen.elapsed() < Duration::from_secs(45),
            "the cloud still lists the frozen instance: {list}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bridge.signal("CONT");
    cloud.wait_log_line("the bridge did not answer a ping in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_two_instances_fails_no_idempotent_request() {
    let mut rig = Rig::start("").await;
    let second = rig.another_instance().await;
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (client, url, upload, key) = (
            rig.cloud.client(),
            rig.api_url("/item?sleep_ms=5"),
            rig.api_url("/upload?sleep_ms=5"),
            rig.tenant.api_key.clone(),
        );
        let (failures, done, stop) = (failures.clone(), done.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            // GET, DELETE, and PUT with a body (which must arrive whole, even when resent).
            let body = vec![b'x'; 1000 + worker];
            let whole = format!("\"bytes\":{}", body.len());
            for i in 0usize.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let ok = match i % 3 {
                    0 => matches!(client.get(&url).bearer_auth(&key).send().await, Ok(r) if r.status() == 200),
                    1 => matches!(client.delete(&url).bearer_auth(&key).send().await, Ok(r) if r.status() == 200),
                    _ => match client.put(&upload).bearer_auth(&key).body(body.clone()).send().await {
                        Ok(r) if r.status() == 200 => r.text().await.is_ok_and(|t| t.contains(&whole)),
                        _ => false,
                    },
                };
                if !ok {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    testkit::wait_until("100 requests done", || done.load(Ordering::SeqCst) >= 100).await;
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let after_kill = done.load(Ordering::SeqCst);
    testkit::wait_until("200 requests done after the kill", || {
        done.load(Ordering::SeqCst) >= after_kill + 200
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "of {} requests",
        done.load(Ordering::SeqCst)
    );
    drop(second);
}

/// Sends a request the internal API answers after `sleep_ms`, waits until it is there, then
/// sends the bridge SIGTERM and waits until it began shutting down; the request's status.
async fn slow_request_then_sigterm(
    rig: &Rig,
    sleep_ms: u64,
) -> tokio::task::JoinHandle<reqwest::Result<u16>> {
    let slow = tokio::spawn({
        let req = rig.request(reqwest::Method::GET, &format!("/slow?sleep_ms={sleep_ms}"));
        async move { req.send().await.map(|r| r.status().as_u16()) }
    });
    testkit::wait_until("the slow request at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) == 1
    })
    .await;
    rig.bridge.signal("TERM");
    testkit::wait_until("the bridge's shutdown", || {
        rig.bridge.log_text().contains("shutdown requested")
    })
    .await;
    slow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_streams_then_exits_zero() {
    let mut rig = Rig::start("").await;
    let client = rig.cloud.client();
    let health_port = rig.bridge.health_port();
    let slow = slow_request_then_sigterm(&rig, 3000).await;
    assert_eq!(
        rig.upstream.stats.current.load(Ordering::SeqCst),
        1,
        "the request finished before the shutdown began: it proves nothing"
    );
    // The operator's port answers through the drain: probes, and the gauge of what drains.
    let livez = client
        .get(format!("http://127.0.0.1:{health_port}/livez"))
        .send()
        .await
        .expect("/livez while draining");
    assert_eq!(livez.status(), 200);
    assert_eq!(rig.bridge.metric("bridge_streams_in_flight").await, 1.0);
    assert_eq!(
        slow.await.unwrap().unwrap(),
        200,
        "the in-flight request was cut"
    );
    assert_eq!(rig.bridge.wait(), Some(0));
    assert!(rig.bridge.log_text().contains("bridge stopped"));
    // With no live tunnel, the known bridge answers 503 + Retry-After; an unknown one 404.
    let res = rig.get("/x").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "5");
    let res = client
        .get(format!(
            "{}/v1/bridges/nope/apis/internal/x",
            rig.cloud.http
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}

/// A second signal exits at once, and says how many streams it cut (they have no audit record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_counting_what_it_cut() {
    let mut rig = Rig::start("").await;
    let slow = slow_request_then_sigterm(&rig, 10_000).await;
    rig.bridge.signal("TERM");
    assert_eq!(rig.bridge.wait(), Some(1));
    let log = rig.bridge.log_text();
    assert!(log.contains("\"cut_streams\":1"), "{log}");
    assert_ne!(slow.await.unwrap().ok(), Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_sigterm_lets_a_forwarded_request_finish() {
    let mut rig = Rig::start("").await;
    let slow = tokio::spawn(
        rig.request(reqwest::Method::GET, "/slow?sleep_ms=3000")
            .send(),
    );
    testkit::wait_until("the slow request at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) == 1
    })
    .await;
    rig.cloud.signal("TERM");
    rig.cloud.wait_log_line("shutdown requested");
    assert_eq!(
        rig.upstream.stats.current.load(Ordering::SeqCst),
        1,
        "the request finished before the shutdown began: it proves nothing"
    );
    let res = slow.await.unwrap().unwrap();
    assert_eq!(res.status(), 200, "the forwarded request was cut");
    assert_eq!(rig.cloud.wait(), Some(0));
    assert!(rig.cloud.log_text().contains("in-flight requests drained"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_resource_makes_health_degraded_until_it_answers() {
    // The port is ours for the whole test and refuses connections until `listen` is called.
    let (socket, port) = testkit::refusing_port();
    let rig = Rig::start(&format!(
        "  - name: dead\n    url: http://127.0.0.1:{port}\n"
    ))
    .await;
    rig.bridge
        .wait_health("degraded", Duration::from_secs(10))
        .await;
    let (code, health) = rig.bridge.health().await.expect("health");
    assert_eq!(code, 200, "degraded is still ready: {health}");
    assert_eq!(health["connection_status"], "connected");
    assert_eq!(
        rig.bridge
            .metric("bridge_resource_up{kind=\"api\",name=\"dead\"}")
            .await,
        0.0
    );
    assert_eq!(
        rig.bridge
            .metric("bridge_resource_up{kind=\"api\",name=\"internal\"}")
            .await,
        1.0
    );
    // The warning is logged as the probe fails; its line may still be on its way to us.
    testkit::wait_until("a warning naming the unreachable resource", || {
        rig.bridge.log_json().iter().any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("resource unreachable"))
                && l["resource"] == "dead"
        })
    })
    .await;
    // The other resource still works meanwhile.
    assert_eq!(rig.get("/still-up").await.status(), 200);

    let listener = socket.listen(16).unwrap();
    rig.bridge
        .wait_health("healthy", Duration::from_secs(10))
        .await;
    assert_eq!(
        rig.bridge
            .metric("bridge_resource_up{kind=\"api\",name=\"dead\"}")
            .await,
        1.0
    );
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_stalls_midway_is_cut_after_the_forward_timeout() {
    let rig = Rig::start_with_cloud_args(&["--forward-timeout", "1"]).await;
    let started = std::time::Instant::now();
    let res = rig.get("/stall").await;
    assert_eq!(res.status(), 200);
    let body = res.bytes().await;
    assert!(body.is_err(), "a stalled body ended normally: {body:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The reset reached the bridge: the record shows the internal system's 200 and only the
    // 8 bytes that streamed, and the stream is no longer in flight.
    let audit = rig.bridge.audit_records(1).await;
    assert_eq!(audit[0]["status"], 200, "{audit:?}");
    assert_eq!(audit[0]["bytes_out"], "partial ".len(), "{audit:?}");
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 0.0)
        .await;
    assert_eq!(rig.get("/fast").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_stops_midway_frees_the_bridge() {
    let rig = Rig::start_with_cloud_args(&["--header-read-timeout", "1"]).await;
    let started = std::time::Instant::now();
    // One chunk, then silence for longer than the test waits.
    let chunks = futures_util::stream::iter(0..2).then(|i| async move {
        if i == 1 {
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        Ok::<_, std::io::Error>(vec![7u8; 1024])
    });
    let sent = rig
        .request(reqwest::Method::POST, "/upload")
        .body(reqwest::Body::wrap_stream(chunks))
        .send();
    let res = tokio::time::timeout(Duration::from_secs(8), sent)
        .await
        .expect("no answer 8 s after a 1 s pause limit")
        .expect("the 408 was not received");
    assert_eq!(res.status(), 408);
    assert!(started.elapsed() < Duration::from_secs(8));
    let body: serde_json::Value = res.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("stopped arriving"),
        "{body}"
    );
    // The bridge saw its stream reset: audited as cut, its slot free again.
    let audit = rig.bridge.audit_records(1).await;
    assert_eq!(audit[0]["status"], 499, "{audit:?}");
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 0.0)
        .await;
    assert_eq!(rig.get("/fast").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_nobody_reads_is_a_504() {
    let rig = Rig::start_with_cloud_args(&["--forward-timeout", "1"]).await;
    let started = std::time::Instant::now();
    // The internal system sleeps without reading; 64 MiB fill every buffer on the way.
    let chunks =
        futures_util::stream::iter(0..64).map(|_| Ok::<_, std::io::Error>(vec![1u8; 1 << 20]));
    let res = rig
        .request(reqwest::Method::POST, "/slow?sleep_ms=30000")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("the 504 was not received");
    assert_eq!(res.status(), 504);
    let body: serde_json::Value = res.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("stopped moving"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 0.0)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_slower_than_the_forward_timeout_is_a_504() {
    let rig = Rig::start_with_cloud_args(&["--forward-timeout", "1"]).await;
    let started = std::time::Instant::now();
    let res = rig.get("/slow?sleep_ms=30000").await;
    assert_eq!(res.status(), 504);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let body: serde_json::Value = res.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("--forward-timeout"),
        "{body}"
    );
    // The bridge saw its stream reset: the request is audited as 499 and no longer in flight.
    let audit = rig.bridge.audit_records(1).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["status"], 499, "{audit:?}");
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 0.0)
        .await;
    // The tunnel is fine afterwards.
    assert_eq!(rig.get("/fast").await.status(), 200);
    // An upload slower than the time-out is not cut: the clock starts when the body ends (and
    // while it arrives, only a pause longer than the time-out would be one).
    let chunks = futures_util::stream::iter(0..6).then(|_| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, std::io::Error>(vec![7u8; 1024])
    });
    let res = rig
        .request(reqwest::Method::POST, "/upload")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: serde_json::Value = res.json().await.unwrap();
    assert_eq!(answer["bytes"], 6 * 1024);
}
