//! The internal API reached through `cloud` → tunnel → `bridge`, with the real binaries over
//! real TLS on loopback.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use testkit::bridge::{INTERNAL_PASSWORD, Rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_and_reports_health_metrics_and_logs() {
    let rig = Rig::start("").await;
    let (code, health) = rig.bridge.health().await.unwrap();
    assert_eq!(code, 200);
    for key in ["status", "version", "connection_status"] {
        assert!(health[key].is_string(), "/health lacks {key}: {health}");
    }
    assert!(health["uptime_seconds"].is_u64(), "{health}");
    // `null` until the first heartbeat, then its time.
    let first_beat = health["last_heartbeat"].clone();
    assert!(
        first_beat.is_null() || first_beat.is_string(),
        "last_heartbeat: {health}"
    );
    assert_eq!(health["connection_status"], "connected");
    assert_eq!(
        rig.bridge
            .metric("service_bridge_connected{name=\"dc1\"}")
            .await,
        1.0
    );
    let metrics = rig.bridge.metrics().await;
    for name in [
        "service_bridge_requests_total",
        "service_bridge_request_duration_seconds_bucket",
        "service_bridge_connection_errors_total",
        "service_bridge_reconnections_total",
    ] {
        assert!(metrics.contains(name), "missing {name}");
    }
    // A plain scrape (curl) gets the Prometheus text format, where a counter's family is
    // named with `_total`; Prometheus, which asks for OpenMetrics, gets that. The cloud's
    // `/metrics` answers alike.
    let scrape = |url: String, accept: Option<&'static str>| async move {
        let mut get = reqwest::Client::new().get(url);
        if let Some(accept) = accept {
            get = get.header("accept", accept);
        }
        let res = get.send().await.unwrap();
        let kind = res.headers()["content-type"].to_str().unwrap().to_string();
        (kind, res.text().await.unwrap())
    };
    let prometheus = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    for url in [
        format!("http://127.0.0.1:{}/metrics", rig.bridge.health_port()),
        format!("{}/metrics", rig.cloud.http),
    ] {
        let (kind, text) = scrape(url.clone(), None).await;
        assert!(
            kind.starts_with("text/plain; version=0.0.4"),
            "{url}: {kind}"
        );
        assert!(!text.contains("# EOF"), "{url}: {text}");
        let (kind, text) = scrape(url.clone(), Some(prometheus)).await;
        assert!(
            kind.starts_with("application/openmetrics-text"),
            "{url}: {kind}"
        );
        assert!(text.ends_with("# EOF\n"), "{url}: {text}");
    }
    let (_, text) = scrape(
        format!("http://127.0.0.1:{}/metrics", rig.bridge.health_port()),
        None,
    )
    .await;
    for family in [
        "# TYPE service_bridge_requests_total counter",
        "# TYPE service_bridge_connection_errors_total counter",
        "# TYPE service_bridge_reconnections_total counter",
        "# TYPE service_bridge_request_duration_seconds histogram",
        "# TYPE service_bridge_connected gauge",
    ] {
        assert!(text.contains(family), "missing {family:?} in\n{text}");
    }
    let logs = rig.bridge.log_json();
    let connected = logs
        .iter()
        .find(|l| l["message"] == "Bridge connected successfully")
        .expect("connect log");
    for key in ["timestamp", "level", "message", "bridge_name", "version"] {
        assert!(connected[key].is_string(), "log lacks {key}: {connected}");
    }
    assert!(connected["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(connected["bridge_name"], "dc1");
    // The cloud lists the bridge with its resources (names and kinds only).
    let list = rig.cloud.get_json(&rig.tenant.api_key, "/v1/bridges").await;
    assert_eq!(list["bridges"][0]["name"], "dc1");
    assert_eq!(
        list["bridges"][0]["instances"][0]["resources"][0]["name"],
        "internal"
    );
    assert!(!list.to_string().contains(INTERNAL_PASSWORD));
    // Times the server makes carry milliseconds, always three digits.
    let instance = &list["bridges"][0]["instances"][0];
    for key in ["connectedAt", "lastHeartbeat"] {
        let t = instance[key].as_str().unwrap();
        assert!(
            t.len() == 24 && t.as_bytes()[19] == b'.' && t.ends_with('Z'),
            "{key}: {t}"
        );
    }
    // Heartbeats (every second here) move /health's last_heartbeat on.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let health = loop {
        let (_, health) = rig.bridge.health().await.unwrap();
        if health["last_heartbeat"].is_string() && health["last_heartbeat"] != first_beat {
            break health;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "last_heartbeat never changed from {first_beat}: {health}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(health["status"], "healthy");
    let beat = health["last_heartbeat"].as_str().unwrap();
    assert!(beat.len() == 24 && beat.ends_with('Z'), "{beat}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_injected_and_the_api_key_is_not_forwarded() {
    let rig = Rig::start("").await;
    let res = rig
        .request(reqwest::Method::GET, "/v1/items?color=red")
        .header("x-http-method-override", "DELETE")
        .header("x-forwarded-for", "127.0.0.1")
        .header("x-original-url", "/admin")
        .header("x-bridge-principal", "sigapi_spoofed")
        .header("x-bridge-method", "DELETE")
        .header("x-bridge-anything", "1")
        .header("x-request-id", "chosen-by-the-caller")
        .header("x_request_id", "chosen-by-the-caller")
        .header("cookie", "session=abc")
        .header("proxy-authorization", "Basic cHJveHk6cHc=")
        .header("proxy-authenticate", "Basic realm=\"x\"")
        .header("forwarded", "for=10.0.0.1;host=evil.example")
        .header("x-forwarded-host", "evil.example")
        .header("x-forwarded-proto", "http")
        .header("x-forwarded-port", "8443")
        .header("x-forwarded-prefix", "/admin")
        .header("x-real-ip", "10.0.0.1")
        .header("x-forwarded", "for=10.0.0.1")
        .header("x-client-ip", "10.0.0.1")
        .header("true-client-ip", "10.0.0.1")
        .header("x-cluster-client-ip", "10.0.0.1")
        .header("client-ip", "10.0.0.1")
        .header("cf-connecting-ip", "10.0.0.1")
        .header("fastly-client-ip", "10.0.0.1")
        .header("x-originating-ip", "10.0.0.1")
        .header("x-remote-addr", "10.0.0.1")
        .header("x-original-forwarded-for", "10.0.0.1")
        .header("x-envoy-external-address", "10.0.0.1")
        .header("via", "1.1 10.0.0.1")
        .header("expect", "100-continue")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let echo: Value = res.json().await.unwrap();
    assert_eq!(echo["method"], "GET", "{echo}");
    // The internal API sees its own host, not the cloud's.
    let authority = rig.upstream.url.trim_start_matches("http://");
    assert_eq!(echo["headers"]["host"], authority, "{echo}");
    for header in [
        "x-http-method-override",
        "x-forwarded-for",
        "x-original-url",
        "x-bridge-org",
        "x-bridge-method",
        "x-bridge-anything",
        "x_request_id",
        "cookie",
        "proxy-authorization",
        "proxy-authenticate",
        "forwarded",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-real-ip",
        "x-forwarded",
        "x-client-ip",
        "true-client-ip",
        "x-cluster-client-ip",
        "client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-originating-ip",
        "x-remote-addr",
        "x-original-forwarded-for",
        "x-envoy-external-address",
        "via",
        "expect",
    ] {
        assert!(
            echo["headers"][header].is_null(),
            "{header} reached the API: {echo}"
        );
    }
    // Who asked reaches the internal system: the API key's public id (never the secret, and
    // never what the caller claimed), and the request id of the audit record.
    let key_id = rig.tenant.api_key.rsplit_once('_').unwrap().0;
    assert_eq!(echo["headers"]["x-bridge-principal"], key_id);
    let request_id = echo["headers"]["x-request-id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(request_id.len(), 36, "the caller's id replaced: {echo}");
    let records = rig.bridge.audit_records(1).await;
    assert!(
        records
            .iter()
            .any(|r| r["request_id"] == request_id.as_str())
    );
    assert_eq!(echo["path"], "/v1/items");
    assert_eq!(echo["query"], "color=red");
    let expected = format!("Basic {}", base64_of(&format!("svc:{INTERNAL_PASSWORD}")));
    assert_eq!(echo["headers"]["authorization"], expected.as_str());
    assert!(
        !echo.to_string().contains(&rig.tenant.api_key),
        "the cloud API key leaked to the internal API"
    );
    assert!(
        !rig.bridge.log_text().contains(INTERNAL_PASSWORD),
        "a secret was logged"
    );
    assert!(
        !rig.bridge.log_text().contains(&rig.token),
        "the token was logged"
    );
    // One audit record, hash-chained, without the query value; the chain verifies.
    let audit = rig.bridge.audit_records(1).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["decision"], "allowed");
    assert_eq!(audit[0]["resource"], "internal");
    assert!(
        audit[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("/v1/items?color"),
        "{audit:?}"
    );
    let log = rig.bridge.dir.path().join("out.log");
    std::fs::write(&log, rig.bridge.log_text()).unwrap();
    let out = std::process::Command::new(testkit::bridge::bridge_bin())
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("1 audit record(s) in 1 chain(s)"), "{said}");
}

fn base64_of(s: &str) -> String {
    use std::fmt::Write;
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = out.write_char(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_both_ways_intact() {
    let rig = Rig::start("").await;
    let size: u64 = 64 * 1024 * 1024;
    let res = rig.get(&format!("/download?bytes={size}")).await;
    assert_eq!(res.status(), 200);
    let mut stream = res.bytes_stream();
    let mut got = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.iter().all(|b| *b == b'x'));
        got += chunk.len() as u64;
    }
    assert_eq!(got, size);
    // Upload 32 MiB as a stream and compare digests.
    let chunk = vec![7u8; 1024 * 1024];
    let mut hasher = Sha256::new();
    for _ in 0..32 {
        hasher.update(&chunk);
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let body =
        futures_util::stream::iter((0..32).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let res = rig
        .request(reqwest::Method::POST, "/upload")
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["bytes"], 32 * 1024 * 1024);
    assert_eq!(answer["sha256"], digest.as_str());
    // The audit records count what really streamed (the upload declared no length).
    let audit = rig.bridge.audit_records(2).await;
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!(audit[0]["bytes_out"], size);
    assert_eq!(audit[1]["method"], "POST");
    assert_eq!(audit[1]["bytes_in"], 32 * 1024 * 1024);
    // The org is named by the id `cloud org list` shows beside its slug.
    let orgs: Value =
        serde_json::from_str(&rig.cloud.admin(&["org", "list", "--output", "json"])).unwrap();
    assert_eq!(orgs[0]["slug"], "acme");
    assert_eq!(audit[0]["org"], orgs[0]["id"], "{orgs}");
}

/// An HTTP/2 upload streamed without Content-Length reaches the internal API whole, for an
/// idempotent PUT (whose body may be held for a retry) as for a POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_upload_without_content_length_arrives_whole() {
    let rig = Rig::start("").await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for method in [reqwest::Method::PUT, reqwest::Method::POST] {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            vec![Ok(vec![b'a'; 1000]), Ok(vec![b'b'; 1000])];
        let res = client
            .request(method.clone(), rig.api_url("/upload"))
            .bearer_auth(&rig.tenant.api_key)
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(res.version(), reqwest::Version::HTTP_2);
        assert_eq!(res.status(), 200, "{method}");
        let text = res.text().await.unwrap();
        assert!(text.contains("\"bytes\":2000"), "{method}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_is_respected_under_load() {
    let rig = Rig::start("    max_connections: 2\n").await;
    let requests = (0..12).map(|_| {
        rig.request(reqwest::Method::GET, "/slow?sleep_ms=150")
            .send()
    });
    let results = futures_util::future::join_all(requests).await;
    for r in results {
        assert_eq!(r.unwrap().status(), 200);
    }
    let peak = rig
        .upstream
        .stats
        .peak
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        peak <= 2,
        "upstream saw {peak} concurrent requests, limit is 2"
    );
    assert_eq!(
        rig.upstream
            .stats
            .total
            .load(std::sync::atomic::Ordering::SeqCst),
        12
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_bounds_the_instance_across_resources() {
    let rig = Rig::start_with(|up| {
        format!(
            "max_connections: 3\n{}  - name: second\n    url: {}\n",
            testkit::bridge::internal_api_yaml(up, ""),
            up.url
        )
    })
    .await;
    let client = rig.cloud.client();
    let requests = (0..12).map(|i| {
        let api = if i % 2 == 0 { "internal" } else { "second" };
        client
            .get(format!(
                "{}/v1/bridges/dc1/apis/{api}/slow?sleep_ms=150",
                rig.cloud.http
            ))
            .bearer_auth(&rig.tenant.api_key)
            .send()
    });
    for r in futures_util::future::join_all(requests).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    let stats = &rig.upstream.stats;
    let peak = stats.peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (2..=3).contains(&peak),
        "upstream saw {peak} concurrent requests over two resources; the instance limit is 3"
    );
    assert_eq!(stats.total.load(std::sync::atomic::Ordering::SeqCst), 12);
}

/// An internal system that writes the injected credentials back into its answer's headers
/// does not hand them to the caller: those headers are removed, and the operator told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_echoing_the_credentials_loses_those_headers() {
    let rig = Rig::start("").await;
    let res = rig.get("/v1/debug?echo_auth=1").await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("x-echo-auth").is_none(), "{res:?}");
    assert_eq!(res.headers()["x-kept"], "1");
    // Written as the answer passed; read until it is there (the log is a file).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = rig.bridge.log_text();
        if log.contains("echoed the entry's credentials") || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        log.contains("echoed the entry's credentials") && log.contains("x-echo-auth"),
        "{log}"
    );
    assert!(!log.contains(INTERNAL_PASSWORD));
}

/// Trailers are header lines too: an internal system that writes the injected credentials
/// into a chunked answer's trailers (a raw server here: hyper sends none unless asked) loses
/// those lines, one hop's and a cookie for the cloud's origin (as its head would), and a
/// caller that asks for trailers (`TE: trailers`), or speaks HTTP/2, gets the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_echoing_the_credentials_lose_those_lines() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let internal = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(answer_with_trailers(tcp));
        }
    });
    let rig = Rig::start_with(move |_| {
        format!(
            "apis:\n  - name: internal\n    url: http://{internal}\n    auth: {{type: basic, username: svc, password: \"${{INTERNAL_PW}}\"}}\n"
        )
    })
    .await;
    let answer = rig.raw("GET", "/trailing", "TE: trailers\r\n", "").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The head still declares both names; the trailer section after the last chunk holds
    // only the harmless one.
    let (_, trailers) = answer.split_once("the body\r\n0\r\n").expect(&answer);
    let trailers = trailers.to_lowercase();
    assert!(trailers.contains("x-kept: 1"), "{answer}");
    assert!(!trailers.contains("x-echo-auth"), "{answer}");
    assert!(!trailers.contains("basic"), "{answer}");
    // Over HTTP/2 (the TLS listener's ALPN), trailers need no declaration.
    let res = rig
        .cloud
        .client()
        .get(format!(
            "{}/v1/bridges/dc1/apis/internal/trailing",
            rig.cloud.https
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    let body = http_body_util::BodyExt::collect(reqwest::Body::from(res))
        .await
        .unwrap();
    let trailers = body.trailers().cloned().unwrap_or_default();
    assert_eq!(trailers.get("x-kept").unwrap(), "1", "{trailers:?}");
    assert!(!trailers.contains_key("x-echo-auth"), "{trailers:?}");
    assert!(!trailers.contains_key("keep-alive"), "{trailers:?}");
    assert!(!trailers.contains_key("set-cookie"), "{trailers:?}");
    assert_eq!(body.to_bytes(), "the body");
    testkit::wait_until("the log line naming the echoing trailer", || {
        let log = rig.bridge.log_text();
        log.contains("echoed the entry's credentials") && log.contains("x-echo-auth")
    })
    .await;
    assert!(!rig.bridge.log_text().contains(INTERNAL_PASSWORD));
    // Both answers arrived whole, trailers and all: audited as whole, not as cut.
    let records = rig.bridge.audit_records(2).await;
    assert_eq!(records.len(), 2, "{records:?}");
    for record in records {
        assert_eq!(record["status"], 200, "{record}");
        assert!(record.get("ended").is_none(), "{record}");
    }
}

/// Answers every request on `tcp` with a chunked body whose trailers repeat the request's
/// `Authorization` (`x-echo-auth`) beside one hop's `keep-alive`, a cookie for the cloud's
/// origin and a harmless `x-kept`.
async fn answer_with_trailers(mut tcp: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&seen[..end]).into_owned();
        seen.drain(..end + 4);
        let auth = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("authorization")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_default();
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\ntrailer: x-echo-auth, x-kept\r\n\r\n8\r\nthe body\r\n0\r\nx-echo-auth: {auth}\r\nkeep-alive: timeout=5\r\nset-cookie: session=1\r\nx-kept: 1\r\n\r\n"
        );
        if tcp.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_rules_and_path_normalisation_refuse_and_audit() {
    let rig = Rig::start("    allow:\n      - {method: GET, path: \"/v1/*\"}\n").await;
    assert_eq!(rig.get("/v1/ok").await.status(), 200);
    let refused = rig.get("/admin").await;
    assert_eq!(refused.status(), 403);
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("GET /admin matches no allow rule of the bridge's apis entry"),
        "{problem}"
    );
    let res = rig
        .request(reqwest::Method::POST, "/v1/ok")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    // A method override in the query (Laravel, Symfony; PHP reads `.method` as `_method`)
    // would make a rule's method admit another (Symfony applies it to POSTs).
    let res = rig.get("/v1/ok?a=1&.method=DELETE").await;
    assert_eq!(res.status(), 403);
    let problem: serde_json::Value = res.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("_method"),
        "{problem}"
    );
    assert_eq!(rig.get("/v1/..%2Fadmin").await.status(), 400);
    assert_eq!(rig.get("/v1/..;/admin").await.status(), 400);
    // TRACE would echo the injected credentials back: never forwarded, rules or not.
    let trace = rig
        .request(reqwest::Method::TRACE, "/v1/ok")
        .send()
        .await
        .unwrap();
    assert_eq!(trace.status(), 405);
    // Nor IIS's TRACK.
    let track = rig
        .request(reqwest::Method::from_bytes(b"TRACK").unwrap(), "/v1/ok")
        .send()
        .await
        .unwrap();
    assert_eq!(track.status(), 405);
    // A full-width slash is a '/' to a server that normalises Unicode: `..／` is `../`.
    let res = rig.get("/v1/..%EF%BC%8F..%EF%BC%8Fadmin").await;
    assert_eq!(res.status(), 400);
    let problem: serde_json::Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("full-width dots and slashes"),
        "{problem}"
    );
    let denied = rig
        .bridge
        .audit_records(9)
        .await
        .into_iter()
        .filter(|l| l["decision"] == "denied")
        .count();
    assert_eq!(denied, 8);
    // Counted by why: the two paths that are not normalised apart from the rules' refusals.
    let refused = |reason: &'static str| {
        let bridge = &rig.bridge;
        async move {
            bridge
                .metric(&format!("bridge_refused_total{{reason=\"{reason}\"}}"))
                .await
        }
    };
    assert_eq!(refused("bad_path").await, 3.0);
    assert_eq!(refused("not_allowed").await, 5.0);
    assert_eq!(
        rig.upstream
            .stats
            .total
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_max_memory_new_streams_are_refused() {
    let rig = Rig::start("max_memory_mb: 1\n").await;
    let res = rig.get("/x").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    // The log line is read from the bridge's output by another thread: it may trail the answer.
    testkit::wait_until("the bridge's log names max_memory_mb", || {
        rig.bridge.log_text().contains("max_memory_mb")
    })
    .await;
    assert!(
        rig.bridge
            .metric("bridge_refused_total{reason=\"memory\"}")
            .await
            >= 1.0
    );
    assert_eq!(
        rig.upstream
            .stats
            .total
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_and_header_credentials_are_injected_and_never_shown() {
    let rig = Rig::start_with(|upstream| {
        format!(
            "apis:\n  - name: internal\n    url: {url}\n    auth: {{type: header, name: X-API-Key, value: \"${{INTERNAL_PW}}\"}}\n  - name: bearer\n    url: {url}\n    auth: {{type: bearer, token: \"${{INTERNAL_PW}}\"}}\n",
            url = upstream.url
        )
    })
    .await;
    let echo: Value = rig.get("/v1/items").await.json().await.unwrap();
    assert_eq!(echo["headers"]["x-api-key"], INTERNAL_PASSWORD);
    assert!(echo["headers"]["authorization"].is_null(), "{echo}");
    // A caller's copy of the injected header, in any spelling a CGI, WSGI or Rack server reads
    // as the same one, never reaches the API beside it.
    let echo: Value = rig
        .request(reqwest::Method::GET, "/v1/items")
        .header("x-api-key", "caller")
        .header("x_api_key", "caller-underscored")
        .header("X_Api-Key", "caller-mixed")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(echo["headers"]["x-api-key"], INTERNAL_PASSWORD, "{echo}");
    assert!(!echo.to_string().contains("caller"), "{echo}");
    let echo: Value = rig
        .cloud
        .client()
        .get(format!(
            "{}/v1/bridges/dc1/apis/bearer/v1/items",
            rig.cloud.http
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        echo["headers"]["authorization"],
        format!("Bearer {INTERNAL_PASSWORD}").as_str()
    );
    assert!(!rig.bridge.log_text().contains(INTERNAL_PASSWORD));
    assert!(!rig.bridge.metrics().await.contains(INTERNAL_PASSWORD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_written_to_a_file_carry_no_colour_codes() {
    let rig = Rig::start_with(|upstream| {
        format!(
            "log_format: text\n{}",
            testkit::bridge::internal_api_yaml(upstream, "")
        )
    })
    .await;
    testkit::wait_until("the connected line", || {
        rig.bridge
            .log_text()
            .contains("Bridge connected successfully")
    })
    .await;
    let logs = rig.bridge.log_text();
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI escape codes in a redirected log: {logs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_named_in_connection_stay_on_their_hop_both_ways() {
    let rig = Rig::start("").await;
    let res = rig
        .request(reqwest::Method::GET, "/v1/items?hop_header=1")
        .header("connection", "x-caller-hop")
        .header("x-caller-hop", "caller-only")
        .header("x-caller-kept", "end-to-end")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers().get("x-upstream-hop").is_none(),
        "{:?}",
        res.headers()
    );
    assert_eq!(res.headers()["x-upstream-kept"], "end-to-end");
    let echo: Value = res.json().await.unwrap();
    assert!(echo["headers"]["x-caller-hop"].is_null(), "{echo}");
    assert_eq!(echo["headers"]["x-caller-kept"], "end-to-end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_are_case_sensitive_and_connect_is_refused_and_audited() {
    let rig = Rig::start("    allow:\n      - {method: GET, path: /v1/*}\n").await;
    assert_eq!(rig.get("/v1/items").await.status(), 200);
    let lower = reqwest::Method::from_bytes(b"get").unwrap();
    let res = rig.request(lower, "/v1/items").send().await.unwrap();
    assert_eq!(res.status(), 403);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let problem: Value = res.json().await.unwrap();
    assert_eq!(problem["status"], 403);
    assert!(problem["detail"].as_str().unwrap().contains("allow rule"));
    // As curl -X CONNECT sends it: a path, not an authority (clients like reqwest cannot).
    let answer = rig.raw("CONNECT", "/v1/items", "", "").await;
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    let records = rig.bridge.audit_records(3).await;
    let connect = records
        .iter()
        .find(|r| r["method"] == "CONNECT")
        .expect("an audit record of the CONNECT");
    assert_eq!(connect["decision"], "denied");
    assert_eq!(connect["rule"], "forbidden-method");
    assert!(
        records
            .iter()
            .any(|r| r["method"] == "get" && r["status"] == 403)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_address_limits_where_health_and_metrics_listen() {
    let rig = Rig::start_with(|upstream| {
        format!(
            "health_check_address: 127.0.0.1\n{}",
            testkit::bridge::internal_api_yaml(upstream, "")
        )
    })
    .await;
    assert_eq!(rig.bridge.health().await.unwrap().0, 200);
    // The kernel's table of listening sockets: this port only on 127.0.0.1 (0100007F), not on
    // every interface (00000000).
    let port = format!(":{:04X} ", rig.bridge.health_port());
    let listening: Vec<String> = std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&port) && l.split_whitespace().nth(3) == Some("0A"))
        .map(str::to_string)
        .collect();
    assert!(!listening.is_empty(), "no listener for {port}");
    assert!(
        listening
            .iter()
            .all(|l| l.contains(&format!("0100007F{}", port.trim_end()))),
        "{listening:?}"
    );
}

/// A server that takes the connection and closes it without a word was reached: the 502 says
/// it closed without answering, not that the bridge cannot reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_without_answering_is_said_to() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = silent.accept().await {
            drop(conn);
        }
    });
    let rig = Rig::start_with(|_| format!("apis:\n  - name: internal\n    url: {url}\n")).await;
    let res = rig.get("/v1/items").await;
    assert_eq!(res.status(), 502);
    let problem: Value = res.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("closed or reset it without answering") && !detail.contains("cannot reach"),
        "{problem} {}",
        rig.bridge.log_text()
    );
}

/// An internal API on HTTPS with a certificate from the customer's private CA: reached with
/// the entry's `tls_ca_file`, and refused (502) by an entry that trusts only the system roots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_api_signed_by_a_private_ca_is_reached_with_its_tls_ca_file() {
    let ca = testkit::tls::TestCa::new();
    let secure = testkit::upstream::Upstream::start_tls(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_pem(dir.path(), "internal-ca.pem");
    let other_ca = testkit::tls::TestCa::new().write_pem(dir.path(), "other-ca.pem");
    let rig = Rig::start_with(|_| {
        format!(
            "apis:\n  - name: internal\n    url: {url}\n    tls_ca_file: {ca}\n  - name: untrusted\n    url: {url}\n  - name: other\n    url: {url}\n    tls_ca_file: {other}\n",
            url = secure.url,
            ca = ca_file.display(),
            other = other_ca.display()
        )
    })
    .await;
    let res = rig.get("/v1/items").await;
    assert_eq!(res.status(), 200);
    let echo: Value = res.json().await.unwrap();
    assert_eq!(echo["path"], "/v1/items");
    // Neither the system roots nor another CA vouch for it: the handshake fails on the
    // certificate, and no request reaches the API.
    for entry in ["untrusted", "other"] {
        let res = rig
            .cloud
            .client()
            .get(format!(
                "{}/v1/bridges/dc1/apis/{entry}/v1/items",
                rig.cloud.http
            ))
            .bearer_auth(&rig.tenant.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 502, "{entry}");
        // The caller learns the kind of failure; the words, which can name the internal
        // server's names, stay in the bridge's log.
        let problem: Value = res.json().await.unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("the TLS handshake failed")
                && !detail.contains("certificate not valid"),
            "{entry}: {problem}"
        );
    }
    testkit::wait_until("the bridge's certificate warning", || {
        rig.bridge.log_text().contains("invalid peer certificate")
    })
    .await;
    assert_eq!(
        secure.stats.total.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percent_encoded_paths_reach_the_api_as_sent() {
    let rig = Rig::start("").await;
    for (sent, path, query) in [
        ("/v1/items/a%20b", "/v1/items/a%20b", ""),
        ("/v1/files/a%3Fb?x=1", "/v1/files/a%3Fb", "x=1"),
        ("/v1/tags/c%23d", "/v1/tags/c%23d", ""),
        ("/v1/blobs/%FF%FE", "/v1/blobs/%FF%FE", ""),
    ] {
        let res = rig.get(sent).await;
        assert_eq!(res.status(), 200, "{sent}");
        let echo: Value = res.json().await.unwrap();
        assert_eq!(echo["path"], path, "{sent}: {echo}");
        assert_eq!(
            echo["query"].as_str().unwrap_or(""),
            query,
            "{sent}: {echo}"
        );
    }
}

/// An internal system's page is served on the cloud's origin, the dashboard's: it reaches the
/// caller sandboxed, not sniffed, and setting no cookie there. A head larger than HTTP/2's
/// default list size (30 KB) passes whole; one over the tunnel's limit is a 502 that says so,
/// audited as 502 (it broke the stream, which read as a failed tunnel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_sandboxed_and_large_heads_pass_or_are_refused_clearly() {
    let rig = Rig::start("").await;
    let res = rig
        .request(reqwest::Method::GET, "/page?origin_headers=1&head_kb=30")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let headers = res.headers();
    for name in [
        "set-cookie",
        "strict-transport-security",
        "alt-svc",
        "clear-site-data",
        "service-worker-allowed",
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "nel",
        "report-to",
        "reporting-endpoints",
        "accept-ch",
        "critical-ch",
        "refresh",
        "www-authenticate",
        "proxy-authenticate",
    ] {
        assert!(headers.get(name).is_none(), "{name} passed: {headers:?}");
    }
    assert_eq!(headers["cache-control"], "private, max-age=600");
    assert_eq!(headers["content-type"], "text/html");
    assert_eq!(headers["content-security-policy"], "sandbox");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let big = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-big-"))
        .count();
    assert_eq!(big, 8, "the large head arrived cut: {headers:?}");

    let res = rig
        .request(reqwest::Method::GET, "/page?head_kb=300")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let body = res.text().await.unwrap();
    assert!(body.contains("more than the tunnel carries"), "{body}");
    let records = rig.bridge.audit_records(2).await;
    assert_eq!(records[1]["status"], 502, "{records:?}");
}

/// An internal API's redirect to its own address comes back as the cloud's: the client
/// follows it through the tunnel, and never sees the internal host. One to another host
/// passes as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_the_api_itself_stay_in_the_tunnel() {
    let rig = Rig::start("").await;
    let client = testkit::dashboard::client(&rig.cloud);
    let location = |path: &str| {
        let (client, url, key) = (
            client.clone(),
            rig.api_url(path),
            rig.tenant.api_key.clone(),
        );
        async move {
            let res = client.get(url).bearer_auth(key).send().await.unwrap();
            assert_eq!(res.status(), 302);
            res.headers()["location"].to_str().unwrap().to_string()
        }
    };
    assert_eq!(
        location("/redirect").await,
        "/v1/bridges/dc1/apis/internal/target?from=redirect#top"
    );
    assert_eq!(
        location("/redirect-away").await,
        "https://sso.internal.example/login"
    );
    // Followed (the key goes along to the same host): the API's answer, through the cloud.
    let echo: Value = rig.get("/redirect").await.json().await.unwrap();
    assert_eq!(echo["path"], "/target", "{echo}");
}

/// `log_level: debug` says each request in the log, as its audit record does, without the
/// query's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_logs_each_settled_request_without_query_values() {
    let rig = Rig::start_with(|upstream| {
        format!(
            "log_level: debug\n{}",
            testkit::bridge::internal_api_yaml(upstream, "")
        )
    })
    .await;
    assert_eq!(rig.get("/v1/ok?token=sekrit").await.status(), 200);
    assert_eq!(rig.bridge.audit_records(1).await.len(), 1);
    let logs = rig.bridge.log_json();
    let settled = logs
        .iter()
        .find(|l| l["message"] == "request settled")
        .expect("a debug line for the request");
    assert_eq!(settled["level"], "debug");
    assert_eq!(settled["resource"], "internal");
    assert_eq!(settled["kind"], "api");
    assert_eq!(settled["status"], 200);
    assert_eq!(
        settled["decision"], "allowed",
        "as the audit record says it"
    );
    assert_eq!(settled["path"], "/apis/internal/v1/ok?token");
    assert!(!rig.bridge.log_text().contains("sekrit"));
}
