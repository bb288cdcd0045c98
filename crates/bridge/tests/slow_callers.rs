//! Callers that stop reading a forwarded answer hold their own stream, not the tunnel: the
//! answers they leave unread fill their streams' HTTP/2 windows, never the whole connection's,
//! so every other caller of the bridge is still answered. And not for long: an answer left
//! unread for `--forward-timeout` is reset, freeing the bridge's slot.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use testkit::bridge::Rig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_stop_reading_hold_up_no_one_else() {
    let rig = Rig::start("").await;
    let addr = rig.cloud.http.trim_start_matches("http://").to_string();
    // Eight downloads of 200 MB whose callers never read a byte: with a connection window of
    // only a few streams' windows, their unread data would stall the whole tunnel.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "GET /v1/bridges/dc1/apis/internal/download?bytes=200000000 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
                rig.tenant.api_key
            )
            .unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.bridge.metric("bridge_streams_in_flight").await < 8.0 {
        assert!(Instant::now() < deadline, "the downloads never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // For three seconds (the unread answers fill their windows within the first), every other
    // request is answered at once.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let mut answered = 0;
    while Instant::now() < until {
        let res = client
            .get(rig.api_url("/v1/ok"))
            .bearer_auth(&rig.tenant.api_key)
            .send()
            .await
            .expect("a request while others stopped reading");
        assert_eq!(res.status(), 200);
        res.bytes().await.expect("its whole body");
        answered += 1;
    }
    // Each answered within the client's 3 s (a blocked one fails above); a loaded machine
    // answers fewer in the time.
    assert!(answered >= 3, "only {answered} requests in three seconds");
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_left_unread_is_reset_and_one_read_slowly_is_not() {
    let rig = Rig::start_with_cloud_args(&["--forward-timeout", "3"]).await;
    let addr = rig.cloud.http.trim_start_matches("http://").to_string();
    let mut unread = TcpStream::connect(&addr).unwrap();
    write!(
        unread,
        "GET /v1/bridges/dc1/apis/internal/download?bytes=200000000 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
        rig.tenant.api_key
    )
    .unwrap();
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 1.0)
        .await;
    // Left unread for the 3 s of --forward-timeout (checked every 2 s), the stream is reset
    // although the caller is still connected: the bridge's slot is free and its record says
    // the answer was cut.
    rig.bridge
        .wait_metric("bridge_streams_in_flight", 0.0)
        .await;
    let records = rig.bridge.audit_records(1).await;
    let download = records
        .iter()
        .find(|r| r["path"].as_str().is_some_and(|p| p.contains("/download")))
        .expect("the download's record");
    assert_eq!(download["ended"], "cut", "{records:?}");
    drop(unread);

    // A caller reading 24 MB at about 4 MB/s (pausing 250 ms between megabytes) for longer
    // than --forward-timeout and a check gets the whole answer.
    let res = rig.get("/download?bytes=24000000").await;
    assert_eq!(res.status(), 200);
    let mut body = res;
    let (mut got, mut since_pause) = (0, 0);
    while let Some(chunk) = body.chunk().await.expect("the slow read is not cut") {
        got += chunk.len();
        since_pause += chunk.len();
        if since_pause >= 1 << 20 {
            since_pause = 0;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    assert_eq!(got, 24_000_000);
}
