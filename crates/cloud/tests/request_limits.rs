//! The limits and header rules of docs/api.md, through the real binary: 431 for heads over
//! 16 KiB, 400 for an HTTP/1.1 request without exactly one `Host`, 422 for more than 500 events (listing at most 100 bad fields) and for a malformed `Idempotency-Key`, Basic auth with
//! the API key as password, the 408 for a body that takes too long in all, and one org's share
//! of the database route's sessions.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, Cloud};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` as raw bytes and returns the whole answer (the server closes after it).
async fn raw(cloud: &Cloud, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(cloud.http.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(request).await.unwrap();
    let mut answer = vec![0u8; 64 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut answer))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_16_kib_is_431() {
    let cloud = Cloud::start(Backend::Sqlite);
    let head = |pad: usize| {
        format!(
            "GET /v1/events HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
            "p".repeat(pad)
        )
    };
    let answer = raw(&cloud, head(17 * 1024).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");
    // Just under the limit the head is read, and the request fails on its missing key.
    let answer = raw(&cloud, head(15 * 1024).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer:.200}");
}

/// HTTP/1.1 names its site in exactly one `Host` (RFC 9112 §3.2): none or two is a 400 that
/// says so; HTTP/1.0 may leave it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_1_request_without_exactly_one_host_is_400() {
    let cloud = Cloud::start(Backend::Sqlite);
    for (head, hosts) in [
        ("GET /livez HTTP/1.1\r\nConnection: close\r\n\r\n", 0),
        (
            "GET /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
            2,
        ),
    ] {
        let answer = raw(&cloud, head.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            answer.contains(&format!(
                "exactly one Host header (RFC 9112 §3.2); this one has {hosts}"
            )),
            "{answer}"
        );
    }
    let answer = raw(&cloud, b"GET /livez HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_500_events_in_one_request_are_422_and_nothing_is_stored() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let batch = |n: usize| json!(vec![json!({"type": "custom", "name": "x"}); n]).to_string();
    let res = cloud.post_signal_text(&t, batch(501)).await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = res.json().await.unwrap();
    assert!(problem.to_string().contains("500"), "{problem}");
    assert_eq!(events(&cloud, &t.api_key).await.len(), 0);
    let res = cloud.post_signal_text(&t, batch(500)).await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    assert_eq!(
        events(&cloud, &t.api_key).await.len(),
        100,
        "a full first page"
    );
    let metrics = cloud.metrics_text().await;
    assert!(
        metrics.contains("signals_events_accepted_total{type=\"custom\"} 500"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_thousands_of_bad_fields_lists_the_first_hundred() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let bad = json!({"type": "deployment", "service": 1, "environment": [], "status": "?"});
    let res = cloud
        .post_signal_text(&t, json!(vec![bad; 500]).to_string())
        .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(
        problem["errors"].as_array().unwrap().len(),
        100,
        "{problem}"
    );
    assert_eq!(problem["errors"][0]["pointer"], "/0/service", "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("1500 field(s) invalid") && detail.contains("the first 100"),
        "{detail}"
    );
    assert_eq!(events(&cloud, &t.api_key).await.len(), 0);
}

async fn events(cloud: &Cloud, key: &str) -> Vec<Value> {
    let list = cloud.get_json(key, "/v1/events?limit=100").await;
    list["events"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_idempotency_key_is_422() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let long = "k".repeat(256);
    let keys: [&[u8]; 4] = [b"", b"   ", long.as_bytes(), "caf\u{e9}".as_bytes()];
    for key in keys {
        let res = cloud
            .client()
            .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
            .bearer_auth(&t.api_key)
            .header(
                "Idempotency-Key",
                reqwest::header::HeaderValue::from_bytes(key).unwrap(),
            )
            .json(&testkit::seed_event())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "{key:?}");
        let problem: Value = res.json().await.unwrap();
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("Idempotency-Key header must be"),
            "{problem}"
        );
        // A header's problem: no errors[] pointing into the body.
        assert_eq!(
            problem["type"], "urn:signals:problem:idempotency-key",
            "{problem}"
        );
        assert!(problem.get("errors").is_none(), "{problem}");
    }
    // Two keys: which one is meant cannot be known.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .json(&testkit::seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("sent more than once"),
        "{problem}"
    );
    // The longest accepted key is 255 characters.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .header("Idempotency-Key", "k".repeat(255))
        .json(&testkit::seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    assert_eq!(events(&cloud, &t.api_key).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_takes_the_api_key_as_password_with_any_user() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .basic_auth("ci-runner", Some(&t.api_key))
        .json(&testkit::seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let list = cloud
        .client()
        .get(format!("{}/v1/events", cloud.http))
        .basic_auth("anyone", Some(&t.api_key))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    let wrong = cloud
        .client()
        .get(format!("{}/v1/events", cloud.http))
        .basic_auth(&t.api_key, Some("not-the-key"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let challenge = wrong.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("Basic realm="), "{challenge}");
}

/// With `--header-read-timeout 2` a body may take 8 s in all: one that never pauses for 2 s,
/// and arrives fast enough for the rate rule (4 KiB/s after 5 s), is still cut at 8 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_still_arriving_after_four_times_the_read_timeout_is_408() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--header-read-timeout", "2"]);
    let t = cloud.tenant("acme");
    let mut tcp = TcpStream::connect(cloud.http.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST /v1/signals/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[",
        t.signal_key, t.api_key
    );
    let started = Instant::now();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        // 4 KiB every 500 ms (8 KiB/s): never a 2 s pause, above the minimum rate, and
        // never whole (a megabyte takes two minutes).
        while write.write_all(&[b' '; 4096]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut answer))
        .await
        .expect("an answer within 20 s")
        .ok();
    let took = started.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("did not arrive whole within 8 s"),
        "{answer}"
    );
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_secs(14),
        "cut after {took:?}"
    );
}

/// The dashboard's forms and correlation's JSON are read whole before their handlers run,
/// under the same pause rule as signals: a sign-in whose body stops arriving gets a 408 after
/// `--header-read-timeout`, and does not hold its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_whose_body_pauses_gets_408() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--header-read-timeout", "1"]);
    for path in ["/sign-in", "/v1/alerts/x/cause"] {
        let mut tcp = TcpStream::connect(cloud.http.trim_start_matches("http://"))
            .await
            .unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 100\r\n\r\nemail=ada"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer))
            .await
            .expect("an answer within 20 s")
            .ok();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.contains("--header-read-timeout"), "{path}: {answer}");
    }
}

/// Asks the database route for a session (`cloud db-proxy`'s request) and returns the
/// connection and the answer's head. No bridge is needed: the route's place is taken, or
/// refused, before the bridge is asked.
async fn open_db_session(cloud: &Cloud, key: &str) -> (TcpStream, String) {
    let mut tcp = TcpStream::connect(cloud.http.trim_start_matches("http://"))
        .await
        .unwrap();
    let request = format!(
        "GET /v1/bridges/dc1/databases/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: Upgrade\r\nUpgrade: postgresql\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut byte))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert_eq!(n, 1, "closed before the end of the head: {head:?}");
        head.push(byte[0]);
    }
    (tcp, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_org_holds_at_most_half_of_the_database_sessions() {
    // The cloud caps each listener at (hard open-file limit - 128) / 2 connections: 514 must fit.
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    assert!(
        hard >= 1_300,
        "this test holds 514 connections: it needs a hard open-file limit of at least 1,300 (ulimit -Hn), not {hard}"
    );
    let cloud = Cloud::start(Backend::Sqlite);
    let (acme, globex) = (cloud.tenant("acme"), cloud.tenant("globex"));
    let mut held = Vec::new();
    for n in 0..512 {
        let (tcp, head) = open_db_session(&cloud, &acme.api_key).await;
        assert!(head.starts_with("HTTP/1.1 101"), "session {n}: {head}");
        held.push(tcp);
    }
    let (_, head) = open_db_session(&cloud, &acme.api_key).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    // Another org still has room.
    let (_other, head) = open_db_session(&cloud, &globex.api_key).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // A session that ends gives its place back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (tcp, head) = open_db_session(&cloud, &acme.api_key).await;
        if head.starts_with("HTTP/1.1 101") {
            held.push(tcp);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the place never came back: {head}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A request refused on its head alone (wrong key, no `Content-Type`, too long, compressed), or
/// on reading past a route's limit, while its client is
/// still sending the body: the client gets the refusal, not a reset stream. Debian's curl
/// over HTTP/2 reports a stream reset after the answer as "Stream error in the HTTP/2 framing
/// layer" and shows no status at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_reaches_a_client_still_sending_its_body() {
    let cloud = Cloud::start(Backend::Sqlite);
    let tenant = cloud.tenant("acme");
    let work = tempfile::tempdir().unwrap();
    let body = work.path().join("body.json");
    // 4 MiB: more than HTTP/2 lets a client send before the server reads.
    std::fs::write(&body, format!("[{}]", "1,".repeat(2 << 20) + "1")).unwrap();
    let curl = |url: String, extra: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--http2", "--cacert"])
            .arg(cloud.ca_path())
            .args(["-o", "/dev/null", "-w", "%{http_code} HTTP/%{http_version}"])
            .args(extra)
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg(url)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        (said, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let signal = format!("{}/v1/signals/{}", cloud.https, tenant.signal_key);
    let json = "Content-Type: application/json";
    let wrong = "Authorization: Bearer sigapi_0000000000000000_00";
    let right = format!("Authorization: Bearer {}", tenant.api_key);
    for (url, headers, status) in [
        (signal.clone(), vec!["-H", wrong, "-H", json], "401"),
        (signal.clone(), vec!["-H", right.as_str()], "415"),
        (
            signal.clone(),
            vec!["-H", right.as_str(), "-H", json],
            "413",
        ),
        (
            signal.clone(),
            vec![
                "-H",
                right.as_str(),
                "-H",
                json,
                "-H",
                "Content-Encoding: gzip",
            ],
            "415",
        ),
        // The JSON and form routes' 2 MiB, announced or found on reading.
        (
            format!("{}/v1/services/api/dependencies", cloud.https),
            vec!["-X", "PUT", "-H", right.as_str(), "-H", json],
            "413",
        ),
        (
            format!("{}/v1/services/api/dependencies", cloud.https),
            vec![
                "-X",
                "PUT",
                "-H",
                right.as_str(),
                "-H",
                json,
                "-H",
                "Transfer-Encoding: chunked",
            ],
            "413",
        ),
        (format!("{}/sign-in", cloud.https), vec![], "413"),
        (
            format!("{}/v1/bridges/dc1/apis/internal/upload", cloud.https),
            vec!["-H", wrong],
            "401",
        ),
        (
            format!("{}/v1/bridges/dc1/apis/internal/upload", cloud.https),
            vec!["-H", right.as_str()],
            "404",
        ),
    ] {
        let (said, err) = curl(url.clone(), &headers);
        assert_eq!(said, format!("{status} HTTP/2"), "{url} {headers:?}: {err}");
    }
}
