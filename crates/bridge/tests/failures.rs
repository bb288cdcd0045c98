//! What a caller sees when forwarding fails, through the real binaries: requests that are not
//! safe to send twice are not retried on another instance, a tunnel lost mid-request is a 502,
//! an internal API that never accepts the connection (or never answers the TLS hello) is a 502
//! after 10 s, and a bridge at
//! `max_connections` queues for 5 s, then answers 503 with `Retry-After: 1`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use testkit::bridge::{BridgeProc, Rig, internal_api_yaml};

/// The sum of `relay_retries_total` over its labels.
async fn retries(rig: &Rig) -> f64 {
    rig.cloud
        .metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("relay_retries_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// SIGKILLs whichever of the two instances carries the one stream in flight.
async fn kill_the_carrier(first: &mut BridgeProc, second: &mut BridgeProc) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for bridge in [&mut *first, &mut *second] {
            if bridge.metric("bridge_streams_in_flight").await >= 1.0 {
                bridge.signal("KILL");
                bridge.wait();
                return;
            }
        }
        assert!(Instant::now() < deadline, "no instance carries the request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `request` through two instances, kills the one carrying it while the internal API
/// sleeps, and checks the caller gets 502, the API saw it once, and nothing was retried.
async fn not_retried(request: impl FnOnce(&Rig) -> reqwest::RequestBuilder) {
    let mut rig = Rig::start("").await;
    let mut second = rig.another_instance().await;
    let pending = tokio::spawn(request(&rig).send());
    testkit::wait_until("the request at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) == 1
    })
    .await;
    kill_the_carrier(&mut rig.bridge, &mut second).await;
    let res = pending.await.unwrap().unwrap();
    assert_eq!(res.status(), 502);
    let problem: serde_json::Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("failed while forwarding"),
        "{problem}"
    );
    assert_eq!(
        rig.upstream.stats.total.load(Ordering::SeqCst),
        1,
        "sent twice"
    );
    assert_eq!(retries(&rig).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_not_retried_on_another_instance() {
    not_retried(|rig| {
        rig.request(reqwest::Method::POST, "/orders?sleep_ms=30000")
            .body("{\"order\":1}")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_over_64_kib_is_not_retried_on_another_instance() {
    not_retried(|rig| {
        rig.request(reqwest::Method::PUT, "/upload?sleep_ms=30000")
            .body(vec![b'x'; 64 * 1024 + 1])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_lost_mid_request_is_502() {
    let mut rig = Rig::start("").await;
    let pending = tokio::spawn(
        rig.request(reqwest::Method::GET, "/slow?sleep_ms=30000")
            .send(),
    );
    testkit::wait_until("the request at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) == 1
    })
    .await;
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let res = pending.await.unwrap().unwrap();
    assert_eq!(res.status(), 502);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
}

/// A rig whose one API entry is at `url`, and the problem of a GET through it, which must be
/// a 502 after 10 s (the connect's bound) and before 15 s, audited as 502.
async fn answered_502_after_10_s(url: String) -> (Rig, serde_json::Value) {
    let rig =
        Rig::start_with(move |_| format!("apis:\n  - name: internal\n    url: {url}\n")).await;
    let started = Instant::now();
    let res = rig.get("/x").await;
    let took = started.elapsed();
    assert_eq!(res.status(), 502);
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(15),
        "answered after {took:?}"
    );
    let problem: serde_json::Value = res.json().await.unwrap();
    assert_eq!(rig.bridge.audit_records(1).await[0]["status"], 502);
    (rig, problem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_api_that_never_accepts_is_502_after_10_s() {
    let (hole, _queued) = testkit::black_hole().await;
    let port = hole.local_addr().unwrap().port();
    let (rig, problem) = answered_502_after_10_s(format!("http://127.0.0.1:{port}")).await;
    assert!(
        problem["detail"].as_str().unwrap().contains("cannot reach"),
        "{problem}"
    );
    // The caller is not told the internal address; the operator's log names it.
    assert!(
        !problem.to_string().contains(&format!(":{port}")),
        "{problem}"
    );
    let target = format!("127.0.0.1:{port}");
    testkit::wait_until("a warning naming the host that was not reached", || {
        rig.bridge.log_json().iter().any(|l| {
            l["message"] == "internal resource unreachable"
                && l["resource"] == "internal"
                && l["target"] == target.as_str()
        })
    })
    .await;
    // Counted where an alert on unreachable internal servers looks.
    assert_eq!(
        rig.bridge
            .metric("bridge_refused_total{reason=\"upstream_unavailable\"}")
            .await,
        1.0
    );
}

/// An https internal API that takes the connection and never answers the TLS hello (a wrong
/// port, a stuck server) is a 502 after 10 s, not a wait until the cloud's forward timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_api_that_never_answers_the_hello_is_502_after_10_s() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let (_rig, problem) = answered_502_after_10_s(format!("https://127.0.0.1:{port}")).await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("connecting or its TLS handshake timed out")
            && detail.contains("speaks TLS"),
        "{problem}"
    );
    silent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_at_max_connections_queues_5_s_then_answers_503() {
    let rig = Rig::start_with(|upstream| {
        format!("max_connections: 1\n{}", internal_api_yaml(upstream, ""))
    })
    .await;
    // Every reason's series is there from the start, at 0 (alert rules need one to exist).
    for reason in [
        "not_declared",
        "not_allowed",
        "bad_path",
        "overloaded",
        "memory",
        "upstream_auth",
        "upstream_unavailable",
    ] {
        let series = format!("bridge_refused_total{{reason=\"{reason}\"}}");
        assert_eq!(rig.bridge.metric(&series).await, 0.0, "{series}");
    }
    let busy = tokio::spawn(
        rig.request(reqwest::Method::GET, "/slow?sleep_ms=60000")
            .send(),
    );
    testkit::wait_until("the first request at the internal API", || {
        rig.upstream.stats.current.load(Ordering::SeqCst) == 1
    })
    .await;
    let started = Instant::now();
    let res = rig.get("/second").await;
    let waited = started.elapsed();
    assert_eq!(res.status(), 503);
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(10),
        "refused after {waited:?}"
    );
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(
        rig.bridge
            .metric("bridge_refused_total{reason=\"overloaded\"}")
            .await,
        1.0
    );
    assert_eq!(rig.upstream.stats.total.load(Ordering::SeqCst), 1);

    // Three times max_connections wait; one more is refused at once, which keeps the tunnel's
    // last stream slot (4 × max_connections + 1) free for the heartbeat.
    let waiting: Vec<_> = (0..3)
        .map(|i| tokio::spawn(rig.request(reqwest::Method::GET, &format!("/w{i}")).send()))
        .collect();
    rig.bridge.wait_metric("bridge_streams_waiting", 3.0).await;
    let res = rig.get("/one-more").await;
    assert_eq!(res.status(), 503);
    let said = res.text().await.unwrap();
    assert!(
        said.contains("three times max_connections streams already wait"),
        "{said}"
    );
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap().status(), 503);
    }
    rig.bridge.wait_metric("bridge_streams_waiting", 0.0).await;

    // A caller that leaves while its stream waits for a slot is in the audit too (499).
    let quitter = rig
        .request(reqwest::Method::GET, "/quitter")
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(quitter.is_err(), "{quitter:?}");
    rig.bridge
        .audit_records_until("the quitter's audit record", |r| {
            r["path"] == "/apis/internal/quitter"
                && r["status"] == 499
                && r["rule"].as_str().is_some_and(|rule| {
                    rule.contains("caller left before the stream was forwarded")
                })
        })
        .await;
    busy.abort();
}

/// An internal server that reads a request and writes `answer` as it is: its port.
async fn raw_server(answer: String) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = server.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 8192];
                let _ = conn.read(&mut head).await;
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// A rig whose one API, `internal`, is `raw_server(answer)`.
async fn raw_rig(answer: String) -> Rig {
    let port = raw_server(answer).await;
    Rig::start_with(|_| format!("apis:\n  - name: internal\n    url: http://127.0.0.1:{port}\n"))
        .await
}

/// An internal server that frames its answer twice (`Content-Length` and chunked, as a broken
/// proxy may): chunked wins, and the caller gets the body whole instead of a reset stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_framed_twice_arrives_whole() {
    let rig = raw_rig("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n".into()).await;
    let res = rig.get("/twice").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "hi");
}

/// A transfer coding other than chunked (`gzip, chunked`) would be lost on the way, leaving
/// compressed bytes that nothing announces: a 502 for an answer, a 400 for a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_coding_other_than_chunked_is_refused_both_ways() {
    let rig = raw_rig("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n".into()).await;
    let res = rig.get("/coded").await;
    assert_eq!(res.status(), 502);
    let said = res.text().await.unwrap();
    assert!(said.contains("Transfer-Encoding: gzip, chunked"), "{said}");

    let coded = "transfer-encoding: gzip, chunked\r\n";
    let answer = rig
        .raw("POST", "/upload", coded, "2\r\nhi\r\n0\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("Content-Encoding instead"), "{answer}");
}

/// An answer with more header fields than the bridge reads is its 502, said as such: the
/// server was reachable, so the reachability advice would mislead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_too_many_header_fields_is_a_502_saying_so() {
    let fields: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let rig = raw_rig(format!(
        "HTTP/1.1 200 OK\r\n{fields}content-length: 2\r\nconnection: close\r\n\r\nhi"
    ))
    .await;
    let res = rig.get("/many").await;
    assert_eq!(res.status(), 502);
    let said = res.text().await.unwrap();
    assert!(said.contains("more than 100 header fields"), "{said}");
    assert!(!said.contains("can connect"), "{said}");
    // The log line says which kind of entry the name is: a Git source and an API may share one.
    testkit::wait_until("the bridge's warning, with the entry's kind", || {
        rig.bridge.log_json().iter().any(|line| {
            line["message"] == "internal resource's answer cannot be forwarded"
                && line["kind"] == "api"
        })
    })
    .await;
}

/// A caller's upload whose chunked framing is broken is the caller's `400`, said as such: not
/// a tunnel failure to retry, nor a warning about the tunnel in the cloud's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_upload_is_the_callers_400() {
    let rig = Rig::start("").await;
    let chunked = "content-type: application/json\r\ntransfer-encoding: chunked\r\n";
    let broken = "zz\r\nhello\r\n0\r\n\r\n";
    let answer = rig.raw("POST", "/upload", chunked, broken).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("could not read the request body") && !answer.contains("retry"),
        "{answer}"
    );
    assert!(
        !rig.cloud
            .log_text()
            .contains("forwarding through tunnel failed"),
        "{}",
        rig.cloud.log_text()
    );
}
