//! Stopping `cloud serve`: SIGTERM drains what is in flight, `--drain-timeout` bounds that, a
//! second signal exits at once, and a second server on one SQLite database is refused.

use std::time::{Duration, Instant};

use testkit::{Backend, Cloud, Tenant, cloud_bin, on_both_backends, seed_event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

on_both_backends!(sigterm_lets_an_ingest_in_flight_finish_and_stores_it);

/// A signal request whose head and first half of body are sent; the rest is returned.
async fn half_sent_signal(cloud: &Cloud, t: &Tenant) -> (TcpStream, Vec<u8>) {
    let body = seed_event().to_string().into_bytes();
    let head = format!(
        "POST /v1/signals/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        t.signal_key,
        t.api_key,
        body.len()
    );
    let mut tcp = TcpStream::connect(cloud.http.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    tcp.write_all(first).await.unwrap();
    // The request holds a share of `--ingest-memory-mb`: the server is reading its body.
    cloud.wait_ingesting(1).await;
    (tcp, rest.to_vec())
}

async fn sigterm_lets_an_ingest_in_flight_finish_and_stores_it(backend: Backend) {
    let mut cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let (mut tcp, rest) = half_sent_signal(&cloud, &t).await;
    cloud.signal("TERM");
    cloud.wait_log_line("shutdown requested");
    tcp.write_all(&rest).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert_eq!(cloud.wait(), Some(0));
    assert!(cloud.log_text().contains("storage flushed"));
    // Stored: listed after a restart on the same storage.
    cloud.launch();
    let list = cloud.get_json(&t.api_key, "/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_bounds_the_wait_for_requests_in_flight() {
    let mut cloud = Cloud::start_with(
        Backend::Sqlite,
        &["--drain-timeout", "1", "--header-read-timeout", "30"],
    );
    let t = cloud.tenant("acme");
    // Never finished: the server gives it --drain-timeout, then closes it.
    let (_tcp, _rest) = half_sent_signal(&cloud, &t).await;
    let signalled = Instant::now();
    cloud.signal("TERM");
    assert_eq!(cloud.wait(), Some(0));
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "stopped {took:?} after SIGTERM with --drain-timeout 1"
    );
    assert!(cloud.log_text().contains("drain timed out"));
    // The last line says what happened: cut, not drained.
    assert!(
        cloud
            .log_text()
            .contains("after --drain-timeout were cut, storage flushed")
    );
    assert!(!cloud.log_text().contains("in-flight requests drained"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_with_code_1() {
    let mut cloud = Cloud::start_with(Backend::Sqlite, &["--header-read-timeout", "30"]);
    let t = cloud.tenant("acme");
    let (_tcp, _rest) = half_sent_signal(&cloud, &t).await;
    cloud.signal("TERM");
    cloud.wait_log_line("shutdown requested");
    let signalled = Instant::now();
    cloud.signal("TERM");
    assert_eq!(cloud.wait(), Some(1));
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "the second signal waited for the 20 s drain"
    );
    cloud.wait_log_line("second signal: exiting without draining");
}

#[test]
fn a_second_server_on_one_sqlite_database_exits_2() {
    let cloud = Cloud::start(Backend::Sqlite);
    let out = std::process::Command::new(cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(cloud.data_dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("another `cloud serve`"), "{stderr}");
}

/// A server whose log goes to a pipe that was closed (a `| head` that ended) still hears
/// SIGTERM: a log it cannot write is dropped, never a reason for the signal's task to die.
#[test]
fn sigterm_stops_a_server_whose_log_pipe_was_closed() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(cloud_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the log until both listeners are up, then close both pipes.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut listening = 0;
    while listening < 2 {
        let line = lines.next().expect("the log ended before serving").unwrap();
        listening += usize::from(line.contains("\"message\":\"listening\""));
    }
    drop(lines);
    drop(child.stderr.take());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 15 s after SIGTERM with its log pipe closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}
