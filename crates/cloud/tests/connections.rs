//! Connections against the real `cloud` binary: time-outs for clients that stall or idle,
//! and the connection cap that keeps a flood from exhausting file descriptors.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use reqwest::StatusCode;
use testkit::{Backend, Cloud, seed_event};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cloud = Cloud::start_with(Backend::Sqlite, &["--header-read-timeout", "1"]);
    let addr = cloud.http.trim_start_matches("http://");
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the connection was still open 10 s after a 1 s header time-out"
    );
    // The server itself is fine.
    let res = cloud
        .client()
        .get(format!("{}/livez", cloud.http))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_but_a_slow_request_on_it_finishes() {
    use futures_util::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let cloud = Cloud::start_with(Backend::Sqlite, &["--header-read-timeout", "1"]);
    let t = cloud.tenant("acme");
    let addr = cloud.http.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let conn = tokio::spawn(conn);
    // An upload taking 3.2 s, over two 1 s idle periods, in pieces 0.4 s apart (under the 1 s
    // pause limit): the connection is told to close (GOAWAY) but this stream completes.
    let event = seed_event().to_string().into_bytes();
    let parts: Vec<Vec<u8>> = event
        .chunks(event.len().div_ceil(8))
        .map(<[u8]>::to_vec)
        .collect();
    let body = StreamBody::new(Box::pin(futures_util::stream::iter(parts).then(
        |part| async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok::<_, std::convert::Infallible>(Frame::data(bytes::Bytes::from(part)))
        },
    )));
    let request = hyper::Request::post(format!("/v1/signals/{}", t.signal_key))
        .header("authorization", format!("Bearer {}", t.api_key))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let answer = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&answer));
    // Then, with nothing more to do, the server closes the connection.
    let closed = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        closed.is_ok(),
        "an idle HTTP/2 connection was still open 10 s after a 1 s idle limit"
    );
}

/// Under a small open-file limit, a flood of connections fills the listeners' caps, not the
/// process's file table: accepting never fails, descriptors stay free for storage, requests on
/// open connections keep working, and new connections are served once the flood is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_under_a_small_open_file_limit_leaves_the_server_working() {
    const LIMIT: usize = 220;
    // The kept connection waits idle through the flood, which takes seconds on a loaded
    // machine: an hour's header-read (idle keep-alive) limit keeps it open however long.
    let cloud = Cloud::start_limited(
        Backend::Sqlite,
        LIMIT as u64,
        &["--header-read-timeout", "3600"],
    );
    let t = cloud.tenant("acme");
    let addr = cloud.http.trim_start_matches("http://").to_string();
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", cloud.pid()))
            .expect("/proc/PID/fd")
            .count()
    };
    // A keep-alive connection, accepted before the flood.
    let kept = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(kept))
        .await
        .unwrap();
    tokio::spawn(conn);
    let livez = hyper::Request::get("/livez")
        .header("host", "x")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let res = sender.send_request(livez).await.unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap();

    let before = fds();
    let mut flood = Vec::new();
    // More than the listener's cap, and more than fit under the limit without one, yet few
    // enough past the cap to fit even a 128-connection backlog.
    for _ in 0..146 {
        flood.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // (220 - 128 reserved) / 2 listeners = 46 connections on this listener, one of them `kept`.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fds() < before + 40 {
        assert!(
            std::time::Instant::now() < deadline,
            "the server accepted only {} of the flood",
            fds().saturating_sub(before)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = fds();
    assert!(
        held < LIMIT - 64,
        "{held} of {LIMIT} file descriptors in use during the flood: fewer than 64 left for storage"
    );

    let post = hyper::Request::post(format!("/v1/signals/{}", t.signal_key))
        .header("host", "x")
        .header("authorization", format!("Bearer {}", t.api_key))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(seed_event().to_string())))
        .unwrap();
    let res = sender.send_request(post).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));

    drop(flood);
    let res = tokio::time::timeout(
        Duration::from_secs(10),
        cloud.client().get(format!("{}/livez", cloud.http)).send(),
    )
    .await
    .expect("a new connection was not served 10 s after the flood ended")
    .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let logs = cloud.log_text();
    assert!(!logs.contains("accept failed"), "{logs}");
    assert!(logs.contains("open-file limit caps connections"), "{logs}");
}

/// Plain HTTP sent to the TLS port is answered in plain HTTP, saying to use `https://` (a TLS
/// alert there reaches curl as "Received HTTP/0.9 when not allowed"); the port still serves
/// TLS afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_is_told_to_use_https() {
    let cloud = Cloud::start(Backend::Sqlite);
    let plain = cloud.https.replace("https://", "http://");
    let res = reqwest::get(format!("{plain}/livez")).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let said = res.text().await.unwrap();
    assert!(
        said.contains("this port speaks TLS (HTTPS): use https://"),
        "{said}"
    );
    let res = cloud
        .client()
        .get(format!("{}/livez", cloud.https))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

/// `--http-listen` on `--listen`'s own port is a usage error that says so, not "Address
/// already in use".
#[test]
fn the_plain_listener_on_the_tls_port_is_a_usage_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(testkit::cloud_bin())
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &addr, "--http-listen", &addr])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("take the same port"), "{stderr}");
}
