//! What every route refuses before its handler, alike on both databases: a NUL character in a
//! path, a query parameter, a form or a JSON body (PostgreSQL's text cannot hold one; the
//! refusal names where it is), and a compressed body; a byte-order mark before JSON is dropped.

use serde_json::{Value, json};
use testkit::{Backend, Cloud};

testkit::on_both_backends!(nul_is_refused_where_it_is_found, bodies_read_as_sent);

async fn nul_is_refused_where_it_is_found(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let client = cloud.client();
    let put = |path: &str, body: Value| {
        client
            .put(format!("{}{path}", cloud.http))
            .bearer_auth(&t.api_key)
            .json(&body)
            .send()
    };
    let res = put(
        "/v1/services/api/dependencies",
        json!({"dependencies": ["a", "b\u{0}c"]}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 422);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["pointer"], "/dependencies/1", "{body}");
    let res = put(
        "/v1/repository-sources",
        json!({"repository": "a\u{0}b", "bridge": "dc1", "source": "code", "path": "a.git"}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 422);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["pointer"], "/repository", "{body}");

    for (path, named) in [
        ("/v1/events?service=a%00b", "query parameter \"service\""),
        ("/v1/dora?service=a%00b", "query parameter \"service\""),
        ("/v1/events/a%00b", "the path"),
        ("/v1/alerts/a%00b/suspects", "the path"),
        ("/v1/bridges/a%00b/apis/x/y", "the path"),
        // Not NUL, but as wrong: a byte that is no UTF-8 would match nothing, silently.
        ("/v1/events?service=%FF", "query parameter \"service\""),
        (
            "/v1/dora?environment=%FF",
            "query parameter \"environment\"",
        ),
    ] {
        let res = client
            .get(format!("{}{path}", cloud.http))
            .bearer_auth(&t.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{path}");
        let body: Value = res.json().await.unwrap();
        let detail = body["detail"].as_str().unwrap();
        let why = if path.contains("%FF") { "UTF-8" } else { "NUL" };
        assert!(
            detail.contains(named) && detail.contains(why),
            "{path}: {body}"
        );
    }
    // A cursor is handed out, never written: one carrying a NUL where the event's id goes is
    // one this API never returned, not a storage outage to retry.
    let cursor = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        "1795910400000000|\u{0}",
    );
    let res = client
        .get(format!("{}/v1/events?limit=1&cursor={cursor}", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("cursor"),
        "{body}"
    );
    let res = client
        .post(format!("{}/v1/signals/sig%00key", cloud.http))
        .json(&json!({"type": "custom", "name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    // A webhook sender's own query parameters, whatever their encoding, lose no event.
    let res = client
        .post(format!(
            "{}/v1/signals/{}?foo=%FF&token=a%00b",
            cloud.http, t.signal_key
        ))
        .bearer_auth(&t.api_key)
        .json(&json!({"type": "custom", "name": "with-query"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());

    // Before sign-in too: a page naming the field, not a storage outage.
    let res = client
        .post(format!("{}/sign-in", cloud.https))
        .form(&[("email", "pg\u{0}@example.com"), ("password", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
    let page = res.text().await.unwrap();
    assert!(
        page.contains("form field &quot;email&quot;")
            || page.contains("form field &#34;email&#34;"),
        "{page}"
    );

    // Nothing was stored, and nothing was taken for an outage.
    assert!(!cloud.log_text().contains("storage unavailable"));
    let (status, deps) = {
        let res = client
            .get(format!("{}/v1/services/api/dependencies", cloud.http))
            .bearer_auth(&t.api_key)
            .send()
            .await
            .unwrap();
        (res.status(), res.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 200);
    assert_eq!(deps["dependencies"], json!([]), "{deps}");
}

async fn bodies_read_as_sent(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let client = cloud.client();
    // A compressed body is refused, naming the header (no route here decodes one).
    let gzipped = {
        use std::io::Write;
        let mut gzip = std::process::Command::new("gzip")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("gzip (apt-get install gzip)");
        let mut stdin = gzip.stdin.take().unwrap();
        stdin
            .write_all(br#"{"type":"custom","name":"gz"}"#)
            .unwrap();
        drop(stdin);
        gzip.wait_with_output().unwrap().stdout
    };
    let res = client
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzipped)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 415);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("Content-Encoding: gzip"),
        "{body}"
    );
    // So is one in a transfer coding other than chunked, which HTTP/1.1 would hand on encoded.
    let answer = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = cloud.http.trim_start_matches("http://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /v1/signals/{} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\nconnection: close\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n",
            t.signal_key, t.api_key
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        answer
    };
    assert!(answer.starts_with("HTTP/1.1 415"), "{answer}");
    assert!(answer.contains("Transfer-Encoding: gzip"), "{answer}");
    // A byte-order mark before a JSON body is dropped, as on `POST /v1/signals`.
    let res = client
        .put(format!("{}/v1/services/api/dependencies", cloud.http))
        .bearer_auth(&t.api_key)
        .header("content-type", "application/json")
        .body("\u{feff}{\"dependencies\":[\"db\"]}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["dependencies"], json!(["db"]), "{body}");
}
