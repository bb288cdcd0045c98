//! Slow uploads cannot starve ingestion: two orgs announcing megabytes and trickling a byte a
//! second hold almost none of `--ingest-memory-mb`, a third org's batches keep being accepted
//! at once, and the trickles are cut for being too slow. Real `cloud`, raw TCP clients.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use testkit::{Backend, Cloud, Tenant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Announces 1,048,000 bytes and sends one a second; returns the status line it got.
async fn trickle(addr: String, t: Tenant) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/signals/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1048000\r\n\r\n[",
        t.signal_key, t.api_key
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut answer = [0u8; 12];
    loop {
        tokio::select! {
            read = s.read(&mut answer) => {
                let n = read.unwrap_or(0);
                return String::from_utf8_lossy(&answer[..n]).into_owned();
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if s.write_all(b" ").await.is_err() {
                    return "closed".into();
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_uploads_of_two_orgs_do_not_starve_a_third() {
    let cloud = Cloud::start_with(
        Backend::Sqlite,
        &["--header-read-timeout", "10", "--signal-rate-limit", "0"],
    );
    let (acme, globex, initech) = (
        cloud.tenant("acme"),
        cloud.tenant("globex"),
        cloud.tenant("initech"),
    );
    let addr = cloud.http.trim_start_matches("http://").to_string();
    let attackers: Vec<_> = [&acme, &acme, &globex, &globex]
        .into_iter()
        .map(|t| tokio::spawn(trickle(addr.clone(), t.clone())))
        .collect();
    // Each trickle holds its first 64 KiB share.
    cloud.wait_ingesting(4 * 64 * 1024).await;

    // ~660 KiB batches of a well-behaved org: each accepted at once, not after a wait.
    let pad = "a".repeat(45_000);
    let big = format!(
        "[{}]",
        vec![format!(r#"{{"type":"custom","name":"x","pad":"{pad}"}}"#); 15].join(",")
    );
    let post = |t: &Tenant, body: String| {
        cloud
            .client()
            .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
            .bearer_auth(&t.api_key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for _ in 0..3 {
        let asked = Instant::now();
        let res = post(&initech, big.clone()).await.unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED, "{:?}", res.text().await);
        // Waiting for a share would take the trickles' 10 s read time-out.
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "it had to wait for a share"
        );
    }
    // The misbehaving orgs' own well-formed requests go through too.
    let res = post(&acme, testkit::seed_event().to_string())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);

    // The trickles are cut for arriving too slowly, well before their 4 x 10 s.
    for attacker in attackers {
        let status = tokio::time::timeout(Duration::from_secs(15), attacker)
            .await
            .expect("a trickle was never cut")
            .unwrap();
        assert!(status.starts_with("HTTP/1.1 408"), "{status:?}");
    }
}

/// Bodies read whole before a handler (sign-in, the dashboard's forms, correlation's JSON) hold
/// bounded memory: one client address announcing 2 MiB bodies and withholding them holds at
/// most a quarter of the 64 MiB, and its next body gets a 503 with `Retry-After` at once;
/// meanwhile pages without a body and another address's forms are served, and once it leaves
/// its forms are read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_announced_and_withheld_hold_bounded_memory() {
    let cloud = Cloud::start(Backend::Sqlite);
    let addr: std::net::SocketAddr = cloud.http.trim_start_matches("http://").parse().unwrap();
    let mut holders = Vec::new();
    for _ in 0..9 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = "POST /sign-in HTTP/1.1\r\nHost: x\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2097152\r\n\r\nemail=";
        s.write_all(head.as_bytes()).await.unwrap();
        holders.push(s);
    }
    testkit::install_crypto();
    let client_from = |ip: &str| {
        reqwest::Client::builder()
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let (same, other) = (client_from("127.0.0.1"), client_from("127.0.0.2"));
    let sign_in = |client: &reqwest::Client| {
        client
            .post(format!("{}/sign-in", cloud.http))
            .form(&[("email", "a@example.com"), ("password", "x")])
            .send()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let res = loop {
        let res = sign_in(&same).await.unwrap();
        if res.status() == StatusCode::SERVICE_UNAVAILABLE {
            break res;
        }
        assert!(
            Instant::now() < deadline,
            "a small form is still read while its address holds 18 MiB of announced bodies"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(res.headers()["retry-after"], "1");
    let page = same
        .get(format!("{}/sign-in", cloud.http))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK, "a page without a body");
    let res = sign_in(&other).await.unwrap();
    assert_ne!(
        res.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "another address"
    );
    drop(holders);
    testkit::wait_until_async("forms are read again", || async {
        sign_in(&same).await.unwrap().status() != StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
}
