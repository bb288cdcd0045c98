//! Callers that stop reading a forwarded answer hold their own stream, not the tunnel: the
//! answers they leave unread fill their streams' HTTP/2 windows, never the whole connection's,
//! so every other caller of the bridge is still answered.

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
    assert!(answered > 10, "only {answered} requests in three seconds");
    drop(stalled);
}
