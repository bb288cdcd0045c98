//! The Signals API end to end, against the real `cloud` binary, on SQLite and PostgreSQL.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, Cloud, Tenant, on_both_backends, seed_event};

on_both_backends!(
    seed_event_is_accepted_and_read_back,
    every_error_status_has_a_problem_body,
    rate_limit_answers_429_with_retry_after,
    storage_outage_is_503_not_a_client_error,
    orgs_are_isolated,
    idempotency_key_replays_the_first_answer,
    bad_event_rejects_the_whole_batch,
    offsets_are_normalised_to_utc,
    list_filters_and_paginates,
    resolve_inherits_from_the_alert_it_closes,
    unknown_fields_and_escapes_are_kept,
    events_sharing_a_time_list_in_arrival_order,
    acknowledged_events_survive_sigkill,
    admin_commands_work_while_serving,
    a_body_that_stops_arriving_is_a_408,
    ingest_memory_is_bounded_and_shared_between_orgs,
    values_that_could_not_be_read_back_are_refused,
    metrics_count_events_by_type_and_refusals_by_reason,
);

async fn post(
    cloud: &Cloud,
    t: &Tenant,
    body: &Value,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .json(body)
        .send()
        .await
        .expect("post");
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

/// The JSON pointers of a 422's `errors`, in order.
fn pointers(problem: &Value) -> Vec<&str> {
    problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect()
}

async fn post_text(cloud: &Cloud, t: &Tenant, body: String) -> reqwest::Response {
    cloud.post_signal_text(t, body).await
}

async fn get(cloud: &Cloud, key: &str, path: &str) -> (StatusCode, Value) {
    let res = cloud
        .client()
        .get(format!("{}{path}", cloud.http))
        .bearer_auth(key)
        .send()
        .await
        .expect("get");
    (res.status(), res.json().await.unwrap_or(Value::Null))
}

fn assert_problem(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &Value,
    want: u16,
) {
    assert_eq!(status.as_u16(), want, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["status"], want);
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:signals:problem:")
    );
    assert!(!body["detail"].as_str().unwrap().is_empty());
}

async fn seed_event_is_accepted_and_read_back(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let (status, _, body) = post(&cloud, &t, &seed_event()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "accepted");
    let id = body["id"].as_str().unwrap();
    // Over TLS this time, with the CA the server made on first start.
    let res = cloud
        .client()
        .get(format!("{}/v1/events/{id}", cloud.https))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let event: Value = res.json().await.unwrap();
    assert_eq!(event["service"], "api");
    assert_eq!(event["metadata"]["runNumber"], "42");
    assert_eq!(event["timestamp"], "2024-01-15T10:30:00Z");
    assert_eq!(event["receivedAt"], body["receivedAt"]);
    assert_server_time(&body["receivedAt"]);
    // Without a timestamp the event's is the receive time, in the server's one format.
    let (status, _, body) = post(&cloud, &t, &json!({"type": "custom", "name": "no-time"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap();
    let (_, event) = get(&cloud, &t.api_key, &format!("/v1/events/{id}")).await;
    assert_eq!(event["timestamp"], body["receivedAt"], "{event}");
    assert_eq!(event["receivedAt"], body["receivedAt"], "{event}");
    // A bound written in nanoseconds (Go's RFC3339Nano) is read to the microsecond.
    let (status, list) = get(
        &cloud,
        &t.api_key,
        "/v1/events?since=2024-01-15T10:30:00.000000999Z&until=2024-01-15T10:30:00.000001001Z",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["events"].as_array().map(Vec::len), Some(1), "{list}");
    // A byte order mark (some Windows tools write one) is no part of the JSON.
    let res = post_text(
        &cloud,
        &t,
        "\u{feff}{\"type\":\"custom\",\"name\":\"bom\"}".into(),
    )
    .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
}

/// A time the server made: RFC 3339, UTC, exactly three fractional digits, `Z`.
fn assert_server_time(value: &Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {value}"));
    let ok = text.len() == 24
        && chrono_like(text)
        && text.as_bytes()[19] == b'.'
        && text[20..23].bytes().all(|b| b.is_ascii_digit())
        && text.ends_with('Z');
    assert!(ok, "{text} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
}

fn chrono_like(text: &str) -> bool {
    text.as_bytes()[4] == b'-' && text.as_bytes()[10] == b'T' && text.as_bytes()[13] == b':'
}

async fn every_error_status_has_a_problem_body(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let other = cloud.tenant("globex");
    let client = cloud.client();
    let url = format!("{}/v1/signals/{}", cloud.http, t.signal_key);
    let send = |req: reqwest::RequestBuilder| async move {
        let res = req.send().await.expect("send");
        let (s, h) = (res.status(), res.headers().clone());
        (s, h, res.json::<Value>().await.unwrap_or(Value::Null))
    };

    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&t.api_key)
            .header("content-type", "application/json")
            .body("{\"type\":"),
    )
    .await;
    assert_problem(s, &h, &b, 400);

    let (s, h, b) = send(client.post(&url).json(&seed_event())).await;
    assert_problem(s, &h, &b, 401);
    assert!(h["www-authenticate"].to_str().unwrap().contains("Bearer"));
    let last = if t.api_key.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{last}", &t.api_key[..t.api_key.len() - 1]);
    let (s, h, b) = send(client.post(&url).bearer_auth(forged).json(&seed_event())).await;
    assert_problem(s, &h, &b, 401);
    // A key sent without its scheme is refused without being echoed back.
    let (s, h, b) = send(
        client
            .post(&url)
            .header("authorization", &t.api_key)
            .json(&seed_event()),
    )
    .await;
    assert_problem(s, &h, &b, 401);
    assert!(!b.to_string().contains(&t.api_key), "{b}");
    // Two keys at once: which one counts is not left to chance.
    let (s, h, b) = send(
        client
            .post(&url)
            .header("authorization", format!("Bearer {}", t.api_key))
            .header("authorization", format!("Bearer {}", other.api_key))
            .json(&seed_event()),
    )
    .await;
    assert_problem(s, &h, &b, 400);
    assert_eq!(b["detail"], "more than one Authorization header; send one");

    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&other.api_key)
            .json(&seed_event()),
    )
    .await;
    assert_problem(s, &h, &b, 403);

    let unknown = format!("{}/v1/signals/sigkey_000000000000000000000000", cloud.http);
    let (s, h, b) = send(
        client
            .post(&unknown)
            .bearer_auth(&t.api_key)
            .json(&seed_event()),
    )
    .await;
    assert_problem(s, &h, &b, 404);

    let (s, h, b) = send(client.get(&url).bearer_auth(&t.api_key)).await;
    assert_problem(s, &h, &b, 405);
    assert_eq!(h["allow"], "POST");

    let big_event = json!({"type": "custom", "name": "x", "blob": "a".repeat(70 * 1024)});
    let (s, h, b) = send(client.post(&url).bearer_auth(&t.api_key).json(&big_event)).await;
    assert_problem(s, &h, &b, 413);
    let huge: Vec<Value> = (0..20)
        .map(|_| json!({"type": "custom", "name": "x", "blob": "a".repeat(60 * 1024)}))
        .collect();
    let (s, h, b) = send(client.post(&url).bearer_auth(&t.api_key).json(&huge)).await;
    assert_problem(s, &h, &b, 413);

    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&t.api_key)
            .header("content-type", "text/plain")
            .body(seed_event().to_string()),
    )
    .await;
    assert_problem(s, &h, &b, 415);
    assert!(
        b["detail"]
            .as_str()
            .unwrap()
            .contains("Content-Type \"text/plain\""),
        "the type sent is named: {b}"
    );
    // Two Content-Type headers, JSON first: refused, whichever one a proxy would read.
    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&t.api_key)
            .header("content-type", "application/json")
            .header("content-type", "text/plain")
            .body(seed_event().to_string()),
    )
    .await;
    assert_problem(s, &h, &b, 415);
    assert!(
        b["detail"].as_str().unwrap().contains("has two or more"),
        "{b}"
    );

    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&t.api_key)
            .json(&json!({"type": "deployment", "service": "api"})),
    )
    .await;
    assert_problem(s, &h, &b, 422);
    let pointers = pointers(&b);
    assert_eq!(pointers, ["/environment", "/status"]);

    // A type of the wrong JSON kind is named as such, not as missing.
    let (s, h, b) = send(
        client
            .post(&url)
            .bearer_auth(&t.api_key)
            .json(&json!({"type": 5})),
    )
    .await;
    assert_problem(s, &h, &b, 422);
    assert_eq!(b["errors"][0]["pointer"], "/type", "{b}");
    let detail = b["errors"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("must be a string, not a number"),
        "{detail}"
    );

    let (s, b) = get(&cloud, &t.api_key, "/v1/events").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        b["events"].as_array().unwrap().len(),
        0,
        "no failed request stored anything"
    );
}

async fn rate_limit_answers_429_with_retry_after(backend: Backend) {
    let cloud = Cloud::start_with(backend, &["--signal-rate-limit", "5"]);
    let t = cloud.tenant("acme");
    let batch: Vec<Value> = (0..10).map(|_| seed_event()).collect();
    let (s, _, b) = post(&cloud, &t, &json!(batch)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the burst (2 × rate) fits: {b}");
    let (s, h, b) = post(&cloud, &t, &seed_event()).await;
    assert_problem(s, &h, &b, 429);
    assert!(h["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
}

async fn storage_outage_is_503_not_a_client_error(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let (s, _, _) = post(&cloud, &t, &seed_event()).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let readyz = || async {
        cloud
            .client()
            .get(format!("{}/readyz", cloud.http))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(readyz().await, StatusCode::OK);
    // Take the events table away behind the server's back.
    cloud.exec_sql("ALTER TABLE events RENAME TO events_gone");
    let (s, h, b) = post(&cloud, &t, &seed_event()).await;
    assert_problem(s, &h, &b, 503);
    assert_eq!(h["retry-after"], "2");
    // Readiness says so too: a load balancer takes this instance out of rotation.
    assert_eq!(readyz().await, StatusCode::SERVICE_UNAVAILABLE);
}

async fn orgs_are_isolated(backend: Backend) {
    let cloud = Cloud::start(backend);
    let a = cloud.tenant("acme");
    let b = cloud.tenant("globex");
    let (_, _, body) = post(&cloud, &a, &seed_event()).await;
    let id = body["id"].as_str().unwrap();
    let cross = Tenant {
        signal_key: a.signal_key.clone(),
        api_key: b.api_key.clone(),
    };
    let (s, _, _) = post(&cloud, &cross, &seed_event()).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = get(&cloud, &b.api_key, &format!("/v1/events/{id}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "another org's event is invisible");
    let (_, list) = get(&cloud, &b.api_key, "/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 0);
    let (_, list) = get(&cloud, &a.api_key, "/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 1);
}

async fn idempotency_key_replays_the_first_answer(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let client = cloud.client();
    let send = || {
        client
            .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
            .bearer_auth(&t.api_key)
            .header("Idempotency-Key", "run-42")
            .json(&seed_event())
            .send()
    };
    let first = send().await.unwrap();
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = send().await.unwrap();
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(first, again);
    // Concurrent repeats also store once.
    let results = futures_util::future::join_all((0..8).map(|_| send())).await;
    for r in results {
        let body: Value = r.unwrap().json().await.unwrap();
        assert_eq!(body["id"], first["id"]);
    }
    let (_, list) = get(&cloud, &t.api_key, "/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 1);
    // The same key with another body is a mistake, said as such, and stores nothing.
    let mut other = seed_event();
    other["version"] = json!("v9.9.9");
    let res = client
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .header("Idempotency-Key", "run-42")
        .json(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(res.headers().get("idempotent-replayed").is_none());
    let problem: Value = res.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("already used for a request with a different body"),
        "{problem}"
    );
    let (_, list) = get(&cloud, &t.api_key, "/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 1);
}

async fn bad_event_rejects_the_whole_batch(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let mut bad = seed_event();
    bad["status"] = json!("exploded");
    let (s, h, b) = post(&cloud, &t, &json!([seed_event(), bad, seed_event()])).await;
    assert_problem(s, &h, &b, 422);
    assert_eq!(b["errors"][0]["pointer"], "/1/status");
    assert!(
        b["errors"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("rolled_back")
    );
    let (_, list) = get(&cloud, &t.api_key, "/v1/events").await;
    assert_eq!(
        list["events"].as_array().unwrap().len(),
        0,
        "nothing of the batch stored"
    );
    let (s, _, b) = post(&cloud, &t, &json!([seed_event(), seed_event()])).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(b["ids"].as_array().unwrap().len(), 2);

    // The server's own fields would be silently replaced, and links must be followable.
    let mut spoof = seed_event();
    spoof["id"] = json!("FAKE-ID");
    spoof["receivedAt"] = json!("1999-01-01T00:00:00Z");
    let alert = json!({"type": "alert", "service": "db", "title": "t", "severity": "info",
        "status": "firing", "links": ["https://runbooks.example.com/db", 1, "not a url",
        {"href": "javascript:alert(1)"}, {"text": "no href"}, {"href": "http://x.example", "text": 5},
        {"href": "http://x.example", "text": " "}, "https:x.example", "https://ada:pw@x.example/",
        "https://x.example/a b", "https://x.example\u{1}", "https://x.example/a\u{202E}fdp.exe"]});
    let (s, h, b) = post(&cloud, &t, &json!([spoof, alert])).await;
    assert_problem(s, &h, &b, 422);
    let pointers = pointers(&b);
    assert_eq!(
        pointers,
        [
            "/0/id",
            "/0/receivedAt",
            "/1/links/1",
            "/1/links/2",
            "/1/links/3/href",
            "/1/links/4/href",
            "/1/links/5/text",
            "/1/links/6/text",
            "/1/links/7",
            "/1/links/8",
            "/1/links/9",
            "/1/links/10",
            "/1/links/11"
        ],
        "{b}"
    );
    assert!(b.to_string().contains("is set by the server"), "{b}");
    assert!(
        !b.to_string().contains(":pw@"),
        "a link's password is not echoed: {b}"
    );
    let good = json!({"type": "alert", "service": "db", "title": "t", "severity": "info",
        "status": "firing", "links": ["https://a.example/x", {"href": "http://b.example", "text": "B", "type": "runbook"}, " https://c.example/y "]});
    let (s, _, _) = post(&cloud, &t, &good).await;
    assert_eq!(s, StatusCode::ACCEPTED);
}

async fn offsets_are_normalised_to_utc(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let mut e = seed_event();
    e["timestamp"] = json!("2024-01-15T12:30:00+02:00");
    e["status"] = json!("succeeded");
    let (_, _, b) = post(&cloud, &t, &e).await;
    let (_, event) = get(
        &cloud,
        &t.api_key,
        &format!("/v1/events/{}", b["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(event["timestamp"], "2024-01-15T10:30:00Z");
    assert_eq!(event["status"], "success");
    // The type in any case, a fraction written in groups of three digits.
    e["type"] = json!("Deployment");
    e["timestamp"] = json!("2024-01-15T12:30:00.5+02:00");
    let (s, _, b) = post(&cloud, &t, &e).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (_, event) = get(
        &cloud,
        &t.api_key,
        &format!("/v1/events/{}", b["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(event["type"], "deployment");
    assert_eq!(event["timestamp"], "2024-01-15T10:30:00.500Z");
    let (_, listed) = get(&cloud, &t.api_key, "/v1/events?type=DEPLOYMENT").await;
    assert_eq!(listed["events"].as_array().unwrap().len(), 2, "{listed}");
    // Blanks around it, as a POST reads them too.
    let (_, listed) = get(&cloud, &t.api_key, "/v1/events?type=%20deployment%20").await;
    assert_eq!(listed["events"].as_array().unwrap().len(), 2, "{listed}");
    e["timestamp"] = json!("2024-01-15T12:30:00");
    let (s, _, b) = post(&cloud, &t, &e).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["errors"][0]["pointer"], "/timestamp");
}

async fn list_filters_and_paginates(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let events: Vec<Value> = (0..7)
        .map(|i| {
            let mut e = seed_event();
            e["timestamp"] = json!(format!("2024-01-15T10:3{i}:00Z"));
            e["environment"] = json!(if i % 2 == 0 { "production" } else { "staging" });
            e
        })
        .chain([json!({"type": "change", "service": " api\n", "summary": "flag on"})])
        .collect();
    let (s, _, _) = post(&cloud, &t, &json!(events)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let mut seen = Vec::new();
    let mut path = "/v1/events?type=deployment&environment=production&limit=2".to_string();
    loop {
        let (s, page) = get(&cloud, &t.api_key, &path).await;
        assert_eq!(s, StatusCode::OK, "{page}");
        for e in page["events"].as_array().unwrap() {
            seen.push(e["timestamp"].as_str().unwrap().to_string());
        }
        match page["nextCursor"].as_str() {
            Some(c) => {
                path =
                    format!("/v1/events?type=deployment&environment=production&limit=2&cursor={c}")
            }
            None => break,
        }
    }
    assert_eq!(
        seen,
        [
            "2024-01-15T10:36:00Z",
            "2024-01-15T10:34:00Z",
            "2024-01-15T10:32:00Z",
            "2024-01-15T10:30:00Z"
        ]
    );
    let (_, page) = get(
        &cloud,
        &t.api_key,
        "/v1/events?since=2024-01-15T10:33:00Z&until=2024-01-15T10:36:00Z&type=deployment",
    )
    .await;
    assert_eq!(page["events"].as_array().unwrap().len(), 3);
    // A name sent with surrounding whitespace is stored without it, and found so, also by a
    // filter written with it.
    let (_, page) = get(
        &cloud,
        &t.api_key,
        "/v1/events?type=change&service=%20api%20",
    )
    .await;
    assert_eq!(page["events"][0]["service"], "api", "{page}");
    let (s, b) = get(&cloud, &t.api_key, "/v1/events?limit=501").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(b["detail"].as_str().unwrap().contains("limit"));
}

async fn resolve_inherits_from_the_alert_it_closes(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let alert = json!({"type": "alert", "service": "api", "title": "disk full", "severity": "critical", "status": "firing", "dedupKey": "disk-1"});
    let (s, _, _) = post(&cloud, &t, &alert).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (s, _, b) = post(
        &cloud,
        &t,
        &json!({"type": "alert", "status": "resolve", "dedupKey": "disk-1"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (_, e) = get(
        &cloud,
        &t.api_key,
        &format!("/v1/events/{}", b["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(e["status"], "resolved");
    assert_eq!(e["title"], "disk full");
    assert_eq!(e["severity"], "critical");
    // An earlier event of the batch with the same dedupKey that is not an alert (other types
    // keep unknown fields) is not what the resolve closes: the stored alert is.
    let (s, _, b) = post(
        &cloud,
        &t,
        &json!([
            {"type": "change", "service": "db", "summary": "resize", "dedupKey": "disk-1"},
            {"type": "alert", "status": "resolved", "dedupKey": "disk-1"}
        ]),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let (_, e) = get(
        &cloud,
        &t.api_key,
        &format!("/v1/events/{}", b["ids"][1].as_str().unwrap()),
    )
    .await;
    assert_eq!(e["service"], "api", "{e}");
    assert_eq!(e["title"], "disk full", "{e}");
    let (s, _, b) = post(
        &cloud,
        &t,
        &json!({"type": "alert", "status": "resolved", "dedupKey": "never-seen"}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["errors"][0]["pointer"], "/dedupKey");
    // In a batch, every such resolve is named by its index; nothing is stored.
    let (s, _, b) = post(
        &cloud,
        &t,
        &json!([
            {"type": "custom", "name": "a"},
            {"type": "alert", "status": "resolved", "dedupKey": "never-seen"},
            {"type": "alert", "status": "resolved", "dedupKey": "disk-1"},
            {"type": "alert", "status": "resolved", "dedupKey": "never-seen-2"}
        ]),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let pointers = pointers(&b);
    assert_eq!(pointers, ["/1/dedupKey", "/3/dedupKey"], "{b}");
}

async fn unknown_fields_and_escapes_are_kept(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    // Sent as text: escapes and number forms that a JSON library would not write itself.
    let text = r#"[
        {"type": " deployment ", "service": "api\u0020v2", "environment": "prod",
         "status": "Succeeded", "ext\"ra": {"nested": [1.50, -3, 2e3, null], "emoji": "\ud83d\ude80"},
         "metadata": {"a/b": true, "n": 7}, "dedupKey": null},
        {"type": "alert", "service": "db", "title": "disk \"full\"", "severity": "critical",
         "status": "firing", "dedupKey": "d1", "source": "grafana"},
        {"type": "alert", "status": "ok", "dedupKey": "d1"}
    ]"#;
    let res = post_text(&cloud, &t, text.to_string()).await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let ids: Value = res.json().await.unwrap();
    let read = |i: usize| {
        let id = ids["ids"][i].as_str().unwrap().to_string();
        let key = t.api_key.clone();
        let cloud = &cloud;
        async move { get(cloud, &key, &format!("/v1/events/{id}")).await.1 }
    };
    let e = read(0).await;
    assert_eq!(e["type"], "deployment");
    assert_eq!(e["service"], "api v2");
    assert_eq!(e["status"], "success");
    assert_eq!(e["ext\"ra"]["nested"], json!([1.5, -3, 2000.0, null]));
    assert_eq!(e["ext\"ra"]["emoji"], "\u{1f680}");
    assert_eq!(e["metadata"], json!({"a/b": true, "n": 7}));
    assert!(e["dedupKey"].is_null());
    let (_, list) = get(&cloud, &t.api_key, "/v1/events?service=api%20v2").await;
    assert_eq!(list["events"].as_array().map(Vec::len), Some(1), "{list}");
    let resolve = read(2).await;
    assert_eq!(resolve["status"], "resolved");
    assert_eq!(resolve["title"], "disk \"full\"");
    assert_eq!(resolve["source"], "grafana");
    assert_eq!(resolve["service"], "db");
}

async fn acknowledged_events_survive_sigkill(backend: Backend) {
    let mut cloud = Cloud::start_with(backend, &["--signal-rate-limit", "0"]);
    let t = cloud.tenant("acme");
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (client, url, key) = (
            cloud.client(),
            format!("{}/v1/signals/{}", cloud.http, t.signal_key),
            t.api_key.clone(),
        );
        let (acked, stop) = (acked.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(res) = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&seed_event())
                    .send()
                    .await
                else {
                    break;
                };
                if res.status() != StatusCode::ACCEPTED {
                    break;
                }
                let Ok(body) = res.json::<Value>().await else {
                    break;
                };
                acked
                    .lock()
                    .unwrap()
                    .push(body["id"].as_str().unwrap().to_string());
            }
        }));
    }
    // Let them post for a moment, then kill the server mid-stream.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while acked.lock().unwrap().len() < 200 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cloud.signal("KILL");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    cloud.wait();
    cloud.launch();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 200, "only {} acknowledged", acked.len());
    let mut stored = std::collections::HashSet::new();
    let mut path = "/v1/events?limit=500".to_string();
    loop {
        let (s, page) = get(&cloud, &t.api_key, &path).await;
        assert_eq!(s, StatusCode::OK);
        for e in page["events"].as_array().unwrap() {
            stored.insert(e["id"].as_str().unwrap().to_string());
        }
        match page["nextCursor"].as_str() {
            Some(c) => path = format!("/v1/events?limit=500&cursor={c}"),
            None => break,
        }
    }
    let lost: Vec<_> = acked.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged events lost",
        lost.len(),
        acked.len()
    );
}

async fn admin_commands_work_while_serving(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let second_key = cloud.admin(&["api-key", "create", "--org", "acme", "--name", "ci"]);
    assert!(second_key.starts_with("sigapi_"));
    let t2 = Tenant {
        signal_key: t.signal_key.clone(),
        api_key: second_key,
    };
    let (s, _, _) = post(&cloud, &t2, &seed_event()).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    assert!(token.starts_with("sigbrt_"));
    assert!(
        cloud
            .admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"])
            .contains("revoked 1")
    );
    let out = cloud.admin_output(&["org", "create", "acme"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a duplicate org is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists already"));
    let out = cloud.admin_output(&["api-key", "create", "--org", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cloud org create nope"));
    // Secrets are never logged.
    assert!(!cloud.log_text().contains(&t.api_key));
}

#[test]
fn unusable_tls_files_are_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "this is not a certificate").unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    // A certificate with another certificate's key.
    let one = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(path("one.pem"), one.cert.pem()).unwrap();
    std::fs::write(path("other.key"), other.signing_key.serialize_pem()).unwrap();
    let cases = [
        (
            vec![
                "--tls-cert".to_string(),
                path("one.pem"),
                "--tls-key".to_string(),
                path("other.key"),
            ],
            "--tls-cert/--tls-key",
            "is not the key of the first certificate in --tls-cert",
        ),
        (
            vec![
                "--tls-cert".to_string(),
                path("missing-cert.pem"),
                "--tls-key".to_string(),
                path("missing-key.pem"),
            ],
            "--tls-cert",
            "missing-cert.pem",
        ),
        (
            vec!["--client-ca".to_string(), path("not-a-ca.pem")],
            "--client-ca",
            "not-a-ca.pem",
        ),
        // The certificate given as its own key.
        (
            vec![
                "--tls-cert".to_string(),
                path("one.pem"),
                "--tls-key".to_string(),
                path("one.pem"),
            ],
            "--tls-key takes the key of --tls-cert's certificate",
            "one.pem: holds no private key",
        ),
    ];
    // Said before anything is stored: no data directory, database or CA is made.
    let data = dir.path().join("data");
    for (args, flag, file) in cases {
        let out = std::process::Command::new(testkit::cloud_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(&data)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(flag), "{stderr}");
        assert!(stderr.contains(file), "{stderr}");
        assert!(!data.exists(), "{args:?} made {}", data.display());
        if flag != "--client-ca" {
            assert!(
                !stderr.contains("--client-ca"),
                "blamed on another flag: {stderr}"
            );
        }
    }
}

/// An RSA key too short for TLS is said to be one (it was "failed to parse private key"); a
/// certificate that has expired starts the server with a warning that says so.
#[test]
fn short_rsa_keys_are_refused_and_expired_certificates_said() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:1024", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout", &path("short.key")])
        .args(["-out", &path("short.pem")])
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{made:?}");
    let out = std::process::Command::new(testkit::cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--data-dir", &path("data")])
        .args([
            "--tls-cert",
            &path("short.pem"),
            "--tls-key",
            &path("short.key"),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("its key is RSA of 1024 bits") && stderr.contains("2048"),
        "{stderr}"
    );

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2020, 2, 1);
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(path("old.pem"), cert.pem()).unwrap();
    std::fs::write(path("old.key"), key.serialize_pem()).unwrap();
    let mut serve = std::process::Command::new(testkit::cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--data-dir", &path("data")])
        .args([
            "--tls-cert",
            &path("old.pem"),
            "--tls-key",
            &path("old.key"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(serve.stdout.take().unwrap()).lines();
    let mut warned = None;
    for line in lines.map_while(Result::ok) {
        if line.contains("expired on") || line.contains("listening") {
            warned = Some(line);
            break;
        }
    }
    serve.kill().unwrap();
    serve.wait().unwrap();
    let warned = warned.expect("the server said nothing");
    assert!(
        warned.contains("the --tls-cert certificate expired on") && warned.contains("2020"),
        "{warned}"
    );
}

async fn a_body_that_stops_arriving_is_a_408(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cloud = Cloud::start_with(backend, &["--header-read-timeout", "1"]);
    let t = cloud.tenant("acme");
    let addr = cloud.http.trim_start_matches("http://");
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/signals/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"type\":",
        t.signal_key, t.api_key
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer 10 s after a 1 s pause limit");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("stopped arriving"), "{answer}");
}

/// `--ingest-memory-mb` bounds the bodies being ingested at once, and one org holds at most
/// half: while acme trickles a large body, a second large one of acme waits, then gets 503 with
/// Retry-After; a small one of acme still fits, and so does another org's large one; the share
/// comes back when a request is answered.
async fn ingest_memory_is_bounded_and_shared_between_orgs(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cloud = Cloud::start_with(
        backend,
        &[
            "--ingest-memory-mb",
            "2",
            "--header-read-timeout",
            "2",
            "--signal-rate-limit",
            "0",
        ],
    );
    let acme = cloud.tenant("acme");
    let globex = cloud.tenant("globex");
    // 15 events of ~45 KB: ~660 KiB, two thirds of what one org may hold (1 MiB).
    let pad = "a".repeat(45_000);
    let big: String = format!(
        "[{}]",
        vec![format!(r#"{{"type":"custom","name":"x","pad":"{pad}"}}"#); 15].join(",")
    );

    // acme's first request holds a share of what it has sent: most of its body at once, then a
    // byte every 0.8 s (never pausing 2 s) until the test has seen the refusal, then the rest.
    let addr = cloud.http.trim_start_matches("http://").to_string();
    let head = format!(
        "POST /v1/signals/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        acme.signal_key,
        acme.api_key,
        big.len()
    );
    let body = big.clone();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (finish, mut finish_rx) = tokio::sync::oneshot::channel::<()>();
    let slow = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let (most, mut rest) = body.as_bytes().split_at(body.len() - 900);
        s.write_all(most).await.unwrap();
        let _ = started_tx.send(());
        while rest.len() > 1 {
            tokio::select! {
                _ = &mut finish_rx => break,
                _ = tokio::time::sleep(Duration::from_millis(800)) => {}
            }
            s.write_all(&rest[..1]).await.unwrap();
            rest = &rest[1..];
        }
        s.write_all(rest).await.unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    });
    started.await.unwrap();
    // The server has read most of it when its share shows in the gauge.
    cloud.wait_ingesting(600 * 1024).await;

    // A small event of acme fits beside it at once; so does globex's large batch.
    let small = post_text(&cloud, &acme, seed_event().to_string()).await;
    assert_eq!(small.status(), StatusCode::ACCEPTED);
    let other_org = post_text(&cloud, &globex, big.clone()).await;
    assert_eq!(
        other_org.status(),
        StatusCode::ACCEPTED,
        "another org's share"
    );
    // A second large one of acme does not fit beside the first (together over acme's half): it
    // waits its 2 s, then 503 with Retry-After.
    let waited = std::time::Instant::now();
    let refused = post_text(&cloud, &acme, big.clone()).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        waited.elapsed() >= Duration::from_millis(1500),
        "it waited first"
    );
    assert_eq!(refused.headers()["retry-after"], "1");
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("--ingest-memory-mb"),
        "{problem}"
    );

    finish.send(()).unwrap();
    let answer = slow.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    // acme's share is back: the same large request now goes through.
    let accepted = post_text(&cloud, &acme, big).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
}

/// What `serde_json::Value` would refuse is refused at the door (400), even in fields the
/// service does not know: a number out of range, a lone surrogate, nesting past 128 levels.
/// Nothing is stored that could not be read back whole.
async fn values_that_could_not_be_read_back_are_refused(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let bodies = [
        r#"{"type":"custom","name":"x","extra":1e400}"#.to_string(),
        r#"{"type":"custom","name":"x","extra":"\ud800"}"#.to_string(),
        r#"{"type":"custom","name":"x","metadata":{"n":-1e999}}"#.to_string(),
        format!(r#"{{"type":"custom","name":"x","extra":{deep}}}"#),
        r#"[{"type":"custom","name":"ok"},{"type":"custom","name":"x","extra":[1e400]}]"#
            .to_string(),
        r#"{"type":"custom","name":"x","a\u0000":"b"}"#.to_string(),
        r#"{"type":"custom","name":"x","metadata":{"a\u0000":"b"}}"#.to_string(),
        r#"{"type":"custom","name":"x","extra":"a\u0000"}"#.to_string(),
    ];
    let mut details = Vec::new();
    for body in bodies {
        let res = post_text(&cloud, &t, body.clone()).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{body:.60}");
        let problem: Value = res.json().await.unwrap();
        details.push(problem["detail"].as_str().unwrap().to_string());
    }
    // Said in words, without serde's column (which counts from the value, not the body).
    assert_eq!(
        details[0],
        "the value at /extra cannot be stored: a number is beyond the range of a 64-bit float"
    );
    assert!(
        details[1].starts_with(
            "the value at /extra cannot be stored: a string holds a lone UTF-16 surrogate escape"
        ),
        "{}",
        details[1]
    );
    // Said where it is, however deep.
    assert!(
        details[2].starts_with("the value at /metadata/n cannot be stored: a number is beyond"),
        "{}",
        details[2]
    );
    assert!(
        details[4].starts_with("the value at /1/extra/0 cannot be stored: a number is beyond"),
        "{}",
        details[4]
    );
    // A NUL is said where it is: in a member's name (named), inside one, or in a string;
    // never as a NUL, which a client could not store or log.
    assert!(!details.iter().any(|d| d.contains('\0')), "{details:?}");
    assert!(
        details[5].starts_with("the value at /a\\u0000 cannot be stored: its name holds"),
        "{}",
        details[5]
    );
    assert!(
        details[6].starts_with(
            "the value at /metadata cannot be stored: a member's name inside it holds"
        ),
        "{}",
        details[6]
    );
    assert!(
        details[7].starts_with("the value at /extra cannot be stored: a string holds \\u0000"),
        "{}",
        details[7]
    );
    let (_, list) = get(&cloud, &t.api_key, "/v1/events").await;
    assert_eq!(list["events"], json!([]), "nothing was stored");
}

async fn events_sharing_a_time_list_in_arrival_order(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    // No timestamps: all three share the receive time; newest first means last sent first.
    let batch = json!([
        {"type": "custom", "name": "first"},
        {"type": "custom", "name": "second"},
        {"type": "custom", "name": "third"},
    ]);
    let (s, _, _) = post(&cloud, &t, &batch).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (_, list) = get(&cloud, &t.api_key, "/v1/events").await;
    let names: Vec<&str> = list["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["third", "second", "first"]);
}

/// With `CLOUD_METRICS_TOKEN` set, `/metrics` (whose figures count every org's events) answers
/// that bearer token only; the probes stay open to load balancers.
#[tokio::test]
async fn metrics_ask_for_the_token_when_one_is_set() {
    let token = "0123456789abcdef0123456789abcdef";
    let cloud = Cloud::start_with_env(Backend::Sqlite, &[], &[("CLOUD_METRICS_TOKEN", token)]);
    let t = cloud.tenant("acme");
    let get = |path: &str, bearer: Option<&str>| {
        let mut req = cloud.client().get(format!("{}{path}", cloud.https));
        if let Some(bearer) = bearer {
            req = req.bearer_auth(bearer);
        }
        req.send()
    };
    for bearer in [
        None,
        Some("0123456789abcdef0123456789abcdee"),
        Some(t.api_key.as_str()),
    ] {
        let res = get("/metrics", bearer).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{bearer:?}");
        assert_eq!(
            res.headers()["www-authenticate"],
            "Bearer realm=\"metrics\""
        );
        let said = res.text().await.unwrap();
        assert!(said.contains("CLOUD_METRICS_TOKEN"), "{said}");
        assert!(!said.contains("signals_events_accepted_total"), "{said}");
    }
    let res = get("/metrics", Some(token)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.text()
            .await
            .unwrap()
            .contains("signals_events_accepted_total")
    );
    // The scheme in any case, as curl users write it.
    let res = cloud
        .client()
        .get(format!("{}/metrics", cloud.https))
        .header("authorization", format!("bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    for probe in ["/livez", "/readyz"] {
        assert_eq!(get(probe, None).await.unwrap().status(), StatusCode::OK);
    }
}

/// `/metrics` counts accepted events by type and refused requests by reason, and times
/// requests by route and group commits; every event type and every reason is there from the
/// start, at 0.
async fn metrics_count_events_by_type_and_refusals_by_reason(backend: Backend) {
    let cloud = Cloud::start(backend);
    let metrics = || async {
        let res = cloud
            .client()
            .get(format!("{}/metrics", cloud.http))
            .send()
            .await
            .unwrap();
        res.text().await.unwrap()
    };
    let before = metrics().await;
    for kind in ["deployment", "alert", "change", "custom"] {
        let line = format!("signals_events_accepted_total{{type=\"{kind}\"}} 0");
        assert!(before.contains(&line), "{line} missing from\n{before}");
    }
    for reason in [
        "unauthorized",
        "invalid",
        "rate_limited",
        "too_large",
        "overloaded",
    ] {
        let line = format!("signals_events_rejected_total{{reason=\"{reason}\"}} 0");
        assert!(before.contains(&line), "{line} missing from\n{before}");
    }
    let t = cloud.tenant("acme");
    let alert = json!({"type": "alert", "service": "db", "title": "t", "severity": "info", "status": "firing"});
    let batch = json!([seed_event(), seed_event(), alert]);
    let (s, _, _) = post(&cloud, &t, &batch).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (s, _, _) = post(&cloud, &t, &json!({"type": "deployment"})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    // Refused on its head alone (a compressed body), before the handler: counted all the same.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let after = metrics().await;
    for line in [
        "signals_events_accepted_total{type=\"deployment\"} 2",
        "signals_events_accepted_total{type=\"alert\"} 1",
        "signals_events_accepted_total{type=\"change\"} 0",
        "signals_events_rejected_total{reason=\"invalid\"} 1",
        "signals_events_rejected_total{reason=\"unsupported_media_type\"} 1",
        "http_request_duration_seconds_count{method=\"POST\",route=\"/v1/signals/{signal_key}\",status=\"202\"} 1",
        "http_request_duration_seconds_count{method=\"POST\",route=\"/v1/signals/{signal_key}\",status=\"422\"} 1",
    ] {
        assert!(after.contains(line), "{line} missing from\n{after}");
    }
    let commits = after
        .lines()
        .find_map(|l| l.strip_prefix("storage_commit_duration_seconds_count "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(commits.is_some_and(|n| n >= 1), "{after}");
}

/// A database that hangs (here: the events table locked by another session) makes `/readyz`
/// answer 503 after its 2 s bound, instead of hanging the probe with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_within_seconds_when_storage_hangs() {
    use sqlx::Connection;
    let cloud = Cloud::start(Backend::Postgres);
    let pg = cloud.pg.as_ref().unwrap();
    let mut locker = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    let asked = std::time::Instant::now();
    let status = cloud
        .client()
        .get(format!("{}/readyz", cloud.http))
        .send()
        .await
        .unwrap()
        .status();
    let took = asked.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "answered after {took:?}"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
}
