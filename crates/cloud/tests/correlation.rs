//! Correlation through the real binary, on both backends: scenario fixtures
//! (`tests/fixtures/correlation.json`) whose right answer a person can see, each an event
//! stream with the expected ranking of the alert's suspects; dependencies declared through the
//! API; late events that re-score; another org's events never appear. Then the DORA figures
//! of a fixture computed by hand, and a confirmed cause counting as a failure.

use std::collections::HashMap;

use chrono::{DateTime, Datelike, Duration, Utc};
use serde_json::{Value, json};
use testkit::{Backend, Cloud, Tenant};

const FIXTURES: &str = include_str!("fixtures/correlation.json");

fn base() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-06-01T12:00:00Z")
        .unwrap()
        .to_utc()
}

/// Posts `event` at `minutes` after the base time; returns its id.
async fn post(cloud: &Cloud, t: &Tenant, minutes: i64, event: &Value) -> String {
    let mut event = event.clone();
    event["timestamp"] = json!((base() + Duration::minutes(minutes)).to_rfc3339());
    cloud.post_event(t, &event).await
}

async fn call(
    cloud: &Cloud,
    t: &Tenant,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = cloud
        .client()
        .request(method, format!("{}{path}", cloud.http))
        .bearer_auth(&t.api_key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

/// The labels of the alert's suspects, in rank order, and the answer.
async fn ranking(
    cloud: &Cloud,
    t: &Tenant,
    alert: &str,
    labels: &HashMap<String, String>,
) -> (Vec<String>, Value) {
    let (status, answer) = call(
        cloud,
        t,
        reqwest::Method::GET,
        &format!("/v1/alerts/{alert}/suspects"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let ranked = answer["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let id = s["event"]["id"].as_str().unwrap();
            labels
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("unknown event {id}"))
        })
        .collect();
    (ranked, answer)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

async fn scenarios(backend: Backend) {
    let cloud = Cloud::start(backend);
    let fixtures: Vec<Value> = serde_json::from_str(FIXTURES).unwrap();
    for (n, f) in fixtures.iter().enumerate() {
        let name = f["name"].as_str().unwrap();
        let own = cloud.tenant(&format!("org{n}"));
        let other = cloud.tenant(&format!("other{n}"));
        if let Some(deps) = f["dependencies"].as_object() {
            for (service, list) in deps {
                let (status, body) = call(
                    &cloud,
                    &own,
                    reqwest::Method::PUT,
                    &format!("/v1/services/{service}/dependencies"),
                    Some(json!({"dependencies": list})),
                )
                .await;
                assert_eq!(status, 200, "{name}: {body}");
            }
        }
        let mut labels = HashMap::new();
        let mut alert = String::new();
        for e in f["events"].as_array().unwrap() {
            let tenant = if e["org"] == "other" { &other } else { &own };
            let id = post(&cloud, tenant, e["at"].as_i64().unwrap(), &e["event"]).await;
            let label = e["label"].as_str().unwrap().to_string();
            if label == "alert" {
                alert = id.clone();
            }
            labels.insert(id, label);
        }
        let (ranked, answer) = ranking(&cloud, &own, &alert, &labels).await;
        assert_eq!(ranked, strings(&f["expect"]), "{name}: {answer:#}");
        for s in answer["suspects"].as_array().unwrap() {
            let score = s["score"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&score), "{name}: {s}");
            assert!(!s["reasons"].as_array().unwrap().is_empty(), "{name}: {s}");
        }
        assert_eq!(answer["alert"]["id"], alert.as_str());
        if let Some(want) = f["expectReason"].as_array() {
            let (label, reason) = (want[0].as_str().unwrap(), want[1].as_str().unwrap());
            let at = ranked.iter().position(|l| l == label).unwrap();
            let reasons = strings(&answer["suspects"][at]["reasons"]);
            assert!(
                reasons.iter().any(|r| r == reason),
                "{name}: {reason:?} not in {reasons:?}"
            );
        }
        if let Some(late) = f["late"].as_array() {
            for e in late {
                let id = post(&cloud, &own, e["at"].as_i64().unwrap(), &e["event"]).await;
                labels.insert(id, e["label"].as_str().unwrap().to_string());
            }
            let (ranked, answer) = ranking(&cloud, &own, &alert, &labels).await;
            assert_eq!(
                ranked,
                strings(&f["expectAfterLate"]),
                "{name}, after the late event: {answer:#}"
            );
        }
        // The other org cannot read this org's alert's suspects at all.
        let (status, _) = call(
            &cloud,
            &other,
            reqwest::Method::GET,
            &format!("/v1/alerts/{alert}/suspects"),
            None,
        )
        .await;
        assert_eq!(status, 404, "{name}");
    }
}

#[tokio::test]
async fn scenarios_rank_as_a_person_would_sqlite() {
    scenarios(Backend::Sqlite).await;
}

#[tokio::test]
async fn scenarios_rank_as_a_person_would_postgres() {
    scenarios(Backend::Postgres).await;
}

#[tokio::test]
async fn bad_input_is_named() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let deploy = post(&cloud, &t, 0, &json!({"type": "deployment", "service": "api", "environment": "production", "status": "success"})).await;
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        &format!("/v1/alerts/{deploy}/suspects"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        body["detail"].as_str().unwrap().contains("not an alert"),
        "{body}"
    );
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/api/dependencies",
        Some(json!({"dependencies": ["db", 3, "api", " ", ""], "extra": 1})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let errors: Vec<(&str, &str)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["pointer"].as_str().unwrap(),
                e["detail"].as_str().unwrap(),
            )
        })
        .collect();
    // Each entry says what is wrong with it.
    assert_eq!(
        errors,
        [
            (
                "/dependencies/1",
                "expected a service name (a string), not a number"
            ),
            ("/dependencies/2", "\"api\" cannot depend on itself"),
            (
                "/dependencies/3",
                "a service name cannot be blank (whitespace only)"
            ),
            ("/dependencies/4", "a service name cannot be empty"),
            (
                "/extra",
                "unknown field \"extra\"; the body is {\"dependencies\": [...]}"
            ),
        ],
        "{body}"
    );
    // A name holding a NUL is named with it written `\u0000`, never as a NUL, which a client
    // could not store or log.
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/api/dependencies",
        Some(json!({"dependencies": [], "a\u{0}b": 1})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["pointer"], "/a\\u0000b", "{body}");
    let detail = body["errors"][0]["detail"].as_str().unwrap();
    assert!(detail.starts_with("the member's name holds"), "{detail:?}");
    // A wrong type is said as such, not as a missing field.
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/api/dependencies",
        Some(json!({"dependencies": "payments-api"})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["errors"][0]["detail"], "dependencies must be an array of service names, not a string",
        "{body}"
    );
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        "/v1/services/api/dependencies",
        None,
    )
    .await;
    assert_eq!(
        (status, body["dependencies"].clone()),
        (200, json!([])),
        "nothing stored"
    );
    // Repeats count once: 120 entries of 50 names are 50 dependencies; 101 names are too many.
    let repeated: Vec<String> = (0..120).map(|i| format!("d{}", i % 50)).collect();
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/checkout/dependencies",
        Some(json!({ "dependencies": repeated })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["dependencies"].as_array().unwrap().len(), 50);
    let many: Vec<String> = (0..101).map(|i| format!("d{i}")).collect();
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/checkout/dependencies",
        Some(json!({ "dependencies": many })),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["errors"][0]["detail"], "at most 100 dependencies, not 101 different names",
        "{body}"
    );
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        "/v1/dora?since=yesterday",
        None,
    )
    .await;
    assert_eq!(status, 400);
    assert!(body["detail"].as_str().unwrap().contains("since"), "{body}");
    // A bound is held to an event's rules: a leap second is refused, not read as the next one.
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        "/v1/dora?since=2016-12-31T23:59:60Z&until=2017-01-02T00:00:00Z",
        None,
    )
    .await;
    assert_eq!(status, 400);
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("since") && detail.contains("leap second"),
        "{body}"
    );
    // An alert's version, sha and repository are strings, like a deployment's.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.signal_key))
        .bearer_auth(&t.api_key)
        .json(&json!({"type": "alert", "service": "api", "status": "triggered", "severity": "error", "title": "x", "version": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["pointer"], "/version", "{body}");
    // A body that is no object is said once, not as every field missing.
    for path in ["/v1/services/api/dependencies", "/v1/repository-sources"] {
        let (status, body) = call(&cloud, &t, reqwest::Method::PUT, path, Some(json!([]))).await;
        assert_eq!(status, 422, "{path}: {body}");
        let errors = body["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{path}: {body}");
        assert!(
            errors[0]["detail"]
                .as_str()
                .unwrap()
                .starts_with("the body must be a JSON object, not an array"),
            "{path}: {body}"
        );
    }
    // A repository too long is shown by its start and length, not echoed whole.
    let long =
        json!({"repository": "r".repeat(1025), "bridge": "dc1", "source": "code", "path": "a.git"});
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/repository-sources",
        Some(long),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let detail = body["errors"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("… (1025 bytes) is not valid"), "{detail}");
    assert!(detail.len() < 600, "{detail}");
    // A service no event could carry, and an empty repository to forget, are named.
    let path = format!("/v1/services/{}/dependencies", "s".repeat(1025));
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        &path,
        Some(json!({"dependencies": []})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/%20/dependencies",
        Some(json!({"dependencies": ["b"]})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("blank"), "{body}");
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::DELETE,
        "/v1/repository-sources?repository=",
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("repository is empty"),
        "{body}"
    );
}

/// A withdrawal whose audit entry cannot be written is not made: the caller's retry finds the
/// cause still there and withdraws it, audited.
#[tokio::test]
async fn a_withdrawal_is_never_left_unaudited() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let deployment = post(
        &cloud,
        &t,
        0,
        &json!({"type": "deployment", "service": "api", "environment": "production",
        "version": "v1", "status": "success"}),
    )
    .await;
    let alert = post(
        &cloud,
        &t,
        10,
        &json!({"type": "alert", "service": "api", "environment": "production",
        "status": "triggered", "severity": "critical", "title": "Errors"}),
    )
    .await;
    let cause = format!("/v1/alerts/{alert}/cause");
    let confirm = Some(json!({"deploymentId": deployment}));
    let (status, body) = call(&cloud, &t, reqwest::Method::POST, &cause, confirm).await;
    assert_eq!(status, 200, "{body}");
    // The audit table refuses the withdrawal's entry (a full disk, a failing database).
    cloud.exec_sql(
        "CREATE TRIGGER refuse_withdrawal BEFORE INSERT ON audit_log \
         WHEN NEW.action = 'alert.withdraw_cause' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    );
    let (status, body) = call(&cloud, &t, reqwest::Method::DELETE, &cause, None).await;
    assert_eq!(status, 503, "{body}");
    cloud.exec_sql("DROP TRIGGER refuse_withdrawal");
    let (status, body) = call(&cloud, &t, reqwest::Method::DELETE, &cause, None).await;
    assert_eq!(status, 204, "the retry withdraws it: {body}");
    let line: Value = serde_json::from_str(&cloud.wait_log_line("alert.withdraw_cause")).unwrap();
    assert_eq!(line["object"], format!("{alert} <- {deployment}"), "{line}");
}

/// A week of deployments of one service whose figures are worked out by hand in
/// docs/correlation.md ("A worked example").
#[tokio::test]
async fn dora_figures_match_the_hand_computed_example() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let day = 24 * 60;
    let deploy = |version: &str, status: &str, commit_minutes_before: i64, at: i64| {
        let commit = (base() + Duration::minutes(at - commit_minutes_before)).to_rfc3339();
        (
            at,
            json!({"type": "deployment", "service": "api", "environment": "production",
            "version": version, "status": status, "metadata": {"commitTimestamp": commit}}),
        )
    };
    let stream = [
        deploy("v1", "success", 60, 0),
        deploy("v2", "success", 120, day),
        deploy("v3", "failure", 30, 2 * day),
        deploy("v3", "success", 90, 2 * day + 30),
        deploy("v4", "success", 240, 3 * day),
        deploy("v3", "success", 10, 3 * day + 60),
        deploy("v5", "success", 180, 5 * day),
    ];
    let mut ids = Vec::new();
    for (at, e) in &stream {
        ids.push(post(&cloud, &t, *at, e).await);
    }
    let alert = post(
        &cloud,
        &t,
        5 * day + 20,
        &json!({"type": "alert", "service": "api", "environment": "production",
        "status": "triggered", "severity": "critical", "title": "Errors"}),
    )
    .await;
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        &format!("/v1/alerts/{alert}/cause"),
        Some(json!({"deploymentId": ids[6]})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The confirmation is audited like the dashboard's, with the API key as the actor.
    let line: Value = serde_json::from_str(&cloud.wait_log_line("alert.confirm_cause")).unwrap();
    assert_eq!(line["object"], format!("{alert} <- {}", ids[6]), "{line}");
    assert!(
        line["actor"].as_str().unwrap().starts_with("sigapi_"),
        "{line}"
    );
    // The same confirmation again changes nothing: answered alike, not audited again.
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        &format!("/v1/alerts/{alert}/cause"),
        Some(json!({"deploymentId": ids[6]})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deploymentId"], json!(ids[6]), "{body}");
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        &format!("/v1/alerts/{alert}/cause"),
        Some(json!({"deploymentId": alert})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.to_string().contains("is an alert, not a deployment"),
        "{body}"
    );
    // An alert that is not there is said first, whatever the body.
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        "/v1/alerts/no-such-alert/cause",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    // JSON of another shape: 422, one entry per missing, wrong or unknown field, like every
    // other JSON route; what is not JSON at all: 400, showing the shape.
    for (sent, pointers) in [
        (
            json!({"deployment": "x"}),
            vec!["/deploymentId", "/deployment"],
        ),
        (json!({"deploymentId": 7}), vec!["/deploymentId"]),
        (json!([1, 2]), vec![""]),
    ] {
        let (status, body) = call(
            &cloud,
            &t,
            reqwest::Method::POST,
            &format!("/v1/alerts/{alert}/cause"),
            Some(sent.clone()),
        )
        .await;
        assert_eq!(status, 422, "{sent}: {body}");
        let found: Vec<&str> = body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert_eq!(found, pointers, "{sent}: {body}");
    }
    let res = cloud
        .client()
        .post(format!("{}/v1/alerts/{alert}/cause", cloud.http))
        .bearer_auth(&t.api_key)
        .header("content-type", "application/json")
        .body("{\"deploymentId\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let problem: Value = res.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the body is not valid JSON: ")
            && detail.contains("EOF while parsing a value at line 1")
            && detail.contains("deploymentId"),
        "{problem}"
    );
    // Not sent as JSON: 415, saying how to send it.
    let res = cloud
        .client()
        .post(format!("{}/v1/alerts/{alert}/cause", cloud.http))
        .bearer_auth(&t.api_key)
        .header("content-type", "text/plain")
        .body(json!({"deploymentId": ids[6]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 415);
    let problem: Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("application/json"),
        "{problem}"
    );
    let figures = |until: DateTime<Utc>| {
        let path = format!(
            "/v1/dora?service=api&environment=production&since={}&until={}",
            urlencode(&base().to_rfc3339()),
            urlencode(&until.to_rfc3339())
        );
        let (cloud, t) = (&cloud, &t);
        async move {
            let (status, f) = call(cloud, t, reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200, "{f}");
            f
        }
    };
    let f = figures(base() + Duration::days(7)).await;
    // 6 successful deployments in 7 days.
    assert_eq!(
        f["deploymentFrequency"],
        json!({"count": 6, "perDay": 0.857}),
        "{f:#}"
    );
    // Lead times of the successes: 60, 120, 90, 240, 10, 180 min -> sorted 10 60 90 120 180 240.
    assert_eq!(
        f["changeLeadTimeSeconds"],
        json!({"p50": 5400.0, "p90": 14400.0, "count": 6}),
        "{f:#}"
    );
    // Failed: v3 (failure), v4 (rolled back to v3), v5 (confirmed cause): 3 of 7 finished.
    assert_eq!(f["changeFailRate"], json!(0.429), "{f:#}");
    // A confirmation made by mistake is withdrawn (audited), and counts no more; once only.
    let cause = format!("/v1/alerts/{alert}/cause");
    let (status, body) = call(&cloud, &t, reqwest::Method::DELETE, &cause, None).await;
    assert_eq!(status, 204, "{body}");
    let line: Value = serde_json::from_str(&cloud.wait_log_line("alert.withdraw_cause")).unwrap();
    assert_eq!(line["object"], format!("{alert} <- {}", ids[6]), "{line}");
    // Logged in order: the withdrawal's line follows any second confirmation's.
    assert_eq!(
        cloud.log_text().matches("\"alert.confirm_cause\"").count(),
        1,
        "the same confirmation twice is audited once"
    );
    let f = figures(base() + Duration::days(7)).await;
    assert_eq!(f["changeFailRate"], json!(0.286), "{f:#}");
    let (status, body) = call(&cloud, &t, reqwest::Method::DELETE, &cause, None).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("has no confirmed cause"),
        "{body}"
    );
    let confirm = Some(json!({"deploymentId": ids[6]}));
    let (status, body) = call(&cloud, &t, reqwest::Method::POST, &cause, confirm).await;
    assert_eq!(status, 200, "{body}");
    // Recovered: v3 failure -> v3 success 30 min later; v4 -> v3 60 min later; v5 not yet.
    assert_eq!(
        f["recoveryTimeSeconds"],
        json!({"p50": 1800.0, "p90": 3600.0, "count": 2}),
        "{f:#}"
    );
    // The window is echoed to the microsecond it was compared at.
    let f = figures(base() + Duration::days(7) + Duration::microseconds(500)).await;
    let shown = |at: &str| f[at].as_str().unwrap().to_string();
    assert!(shown("until").ends_with(".000500Z"), "{f}");
    assert!(shown("since").ends_with(".000Z"), "{f}");
}

/// A deployment confirmed as a cause while its last status said `in_progress` went out: it is
/// counted as finished and failed. The confirmation reads back until it is withdrawn; a change
/// is named as one when confirmed.
#[tokio::test]
async fn a_cause_confirmed_in_progress_counts_and_reads_back() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let deploy = |version: &str, status: &str| {
        json!({"type": "deployment", "service": "api", "environment": "production",
        "version": version, "status": status})
    };
    post(&cloud, &t, 0, &deploy("v0", "success")).await;
    let running = post(&cloud, &t, 50, &deploy("v1", "in_progress")).await;
    let flag = post(
        &cloud,
        &t,
        55,
        &json!({"type": "change", "service": "api", "environment": "production",
        "summary": "flag on"}),
    )
    .await;
    let alert = post(
        &cloud,
        &t,
        60,
        &json!({"type": "alert", "service": "api", "environment": "production",
        "status": "triggered", "severity": "critical", "title": "Errors"}),
    )
    .await;
    let dora = format!(
        "/v1/dora?service=api&since={}&until={}",
        urlencode(&base().to_rfc3339()),
        urlencode(&(base() + Duration::days(1)).to_rfc3339())
    );
    let fail_rate = || async {
        let (status, f) = call(&cloud, &t, reqwest::Method::GET, &dora, None).await;
        assert_eq!(status, 200, "{f}");
        f["changeFailRate"].clone()
    };
    assert_eq!(fail_rate().await, json!(0.0));
    let cause = format!("/v1/alerts/{alert}/cause");
    let (status, body) = call(&cloud, &t, reqwest::Method::GET, &cause, None).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        &cause,
        Some(json!({"deploymentId": flag})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.to_string().contains("is a change, not a deployment"),
        "{body}"
    );
    let confirm = Some(json!({"deploymentId": running}));
    let (status, body) = call(&cloud, &t, reqwest::Method::POST, &cause, confirm).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&cloud, &t, reqwest::Method::GET, &cause, None).await;
    assert_eq!(
        (status, body),
        (200, json!({"alertId": alert, "deploymentId": running}))
    );
    // v0 and the confirmed v1 finished; v1 failed.
    assert_eq!(fail_rate().await, json!(0.5));
    // v1's own success report later is the same deployment: still one of two, not one of three;
    // ranked in place of the confirmed report, it is marked as the confirmed cause.
    let done = post(&cloud, &t, 58, &deploy("v1", "success")).await;
    assert_eq!(fail_rate().await, json!(0.5));
    let (status, answer) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        &format!("/v1/alerts/{alert}/suspects"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let marked: Vec<&Value> = answer["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["confirmed"] == true)
        .collect();
    assert_eq!(marked.len(), 1, "{answer:#}");
    assert_eq!(marked[0]["event"]["id"], done.as_str(), "{answer:#}");
    let (status, _) = call(&cloud, &t, reqwest::Method::DELETE, &cause, None).await;
    assert_eq!(status, 204);
    let (status, body) = call(&cloud, &t, reqwest::Method::GET, &cause, None).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(fail_rate().await, json!(0.0));
}

/// A resolve's suspects are its incident's: ranked from the firing it resolves, not from when
/// it was resolved (30 minutes later, which read as a weaker, older suspect), nor from the
/// same key's incident of the day before.
#[tokio::test]
async fn a_resolve_is_ranked_from_the_firing_it_resolves() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    for (minutes, status) in [(-1440, "triggered"), (-1430, "resolved")] {
        post(
            &cloud,
            &t,
            minutes,
            &json!({"type": "alert", "service": "rz",
            "environment": "production", "status": status, "severity": "critical",
            "title": "rz down", "dedupKey": "rz"}),
        )
        .await;
    }
    let deployment = post(
        &cloud,
        &t,
        -20,
        &json!({"type": "deployment", "service": "rz",
        "environment": "production", "status": "success", "version": "v1"}),
    )
    .await;
    let fired = post(
        &cloud,
        &t,
        0,
        &json!({"type": "alert", "service": "rz",
        "environment": "production", "status": "triggered", "severity": "critical",
        "title": "rz down", "dedupKey": "rz"}),
    )
    .await;
    let resolved = post(
        &cloud,
        &t,
        30,
        &json!({"type": "alert", "status": "resolved",
        "dedupKey": "rz"}),
    )
    .await;
    let suspects = |alert: String| {
        let (cloud, t) = (&cloud, &t);
        async move {
            let path = format!("/v1/alerts/{alert}/suspects");
            let (status, answer) = call(cloud, t, reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200, "{answer}");
            answer["suspects"][0].clone()
        }
    };
    let (on_firing, on_resolve) = (suspects(fired).await, suspects(resolved).await);
    assert_eq!(
        on_resolve["event"]["id"],
        deployment.as_str(),
        "{on_resolve}"
    );
    assert_eq!(on_resolve["score"], on_firing["score"], "{on_resolve}");
    assert_eq!(on_resolve["reasons"], on_firing["reasons"], "{on_resolve}");
    assert!(
        on_resolve["reasons"][0]
            .as_str()
            .unwrap()
            .contains("20 min before the alert"),
        "{on_resolve}"
    );
}

/// Deployments that share a timestamp are read in the order they were received: v2 then v1
/// again at the same minute is a rollback of v2, as it would be a minute apart.
#[tokio::test]
async fn deployments_with_one_timestamp_are_read_in_the_order_received() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let deploy = |version: &str| {
        json!({"type": "deployment", "service": "api", "environment": "production",
        "version": version, "status": "success"})
    };
    post(&cloud, &t, 0, &deploy("v1")).await;
    post(&cloud, &t, 60, &deploy("v2")).await;
    post(&cloud, &t, 60, &deploy("v1")).await;
    let path = format!(
        "/v1/dora?service=api&environment=production&since={}&until={}",
        urlencode(&base().to_rfc3339()),
        urlencode(&(base() + Duration::days(1)).to_rfc3339())
    );
    let (status, f) = call(&cloud, &t, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 200, "{f}");
    // Failed: v2 (rolled back to v1): 1 of 3 finished.
    assert_eq!(f["changeFailRate"], json!(0.333), "{f:#}");
}

/// A name spelt otherwise than the events spell it finds nothing, and the answer says why:
/// an alert's `prod` against deployments to `production`, a DORA query's misspelt service.
#[tokio::test]
async fn an_empty_answer_says_that_names_match_exactly() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    post(
        &cloud,
        &t,
        0,
        &json!({"type": "deployment", "service": "api",
        "environment": "production", "version": "v1", "status": "success"}),
    )
    .await;
    let alert = |environment: &str| {
        json!({"type": "alert", "service": "api", "environment": environment,
            "title": "5xx", "severity": "critical", "status": "triggered"})
    };
    let wrong = post(&cloud, &t, 10, &alert("prod")).await;
    let right = post(&cloud, &t, 11, &alert("production")).await;
    let (_, answer) = ranking(&cloud, &t, &wrong, &HashMap::new()).await;
    assert_eq!(answer["suspects"], json!([]), "{answer}");
    let note = answer["note"].as_str().unwrap();
    assert!(
        note.starts_with("no deployment or change in environment \"prod\" from 24 h before"),
        "{note}"
    );
    let (ranked, answer) = ranking(&cloud, &t, &right, &HashMap::new()).await;
    assert_eq!(ranked.len(), 1, "{answer}");
    assert!(answer.get("note").is_none(), "{answer}");

    let dora = |service: &str| {
        format!(
            "/v1/dora?service={service}&environment=production&since={}&until={}",
            urlencode(&base().to_rfc3339()),
            urlencode(&(base() + Duration::days(1)).to_rfc3339())
        )
    };
    let (status, f) = call(&cloud, &t, reqwest::Method::GET, &dora("apii"), None).await;
    assert_eq!(status, 200, "{f}");
    assert_eq!(f["deploymentFrequency"]["count"], 0, "{f}");
    let note = f["note"].as_str().unwrap();
    assert!(
        note.starts_with(
            "no deployment of service \"apii\" in environment \"production\" in this window"
        ),
        "{note}"
    );
    let (_, f) = call(&cloud, &t, reqwest::Method::GET, &dora("api"), None).await;
    assert_eq!(f["deploymentFrequency"]["count"], 1, "{f}");
    assert!(f.get("note").is_none(), "{f}");
}

/// A noisy alert of the service (over 10,000 firings in the week) does not hide an earlier
/// firing of the alert asked about: it fired before the deployment, so the deployment is a
/// weak suspect.
#[tokio::test]
async fn an_earlier_firing_is_found_behind_a_noisy_alert() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--signal-rate-limit", "0"]);
    let t = cloud.tenant("acme");
    let alert = |title: &str| {
        json!({"type": "alert", "service": "api", "environment": "production",
            "status": "triggered", "severity": "warning", "title": title})
    };
    // 10,500 firings of "CPU high", every 30 s from six days before the base time.
    for batch in 0..21 {
        let events: Vec<Value> = (0..500)
            .map(|i| {
                let mut e = alert("CPU high");
                let at = base() - Duration::days(6) + Duration::seconds(30 * (batch * 500 + i));
                e["timestamp"] = json!(at.to_rfc3339());
                e
            })
            .collect();
        let res = cloud
            .post_signal_text(&t, serde_json::to_string(&events).unwrap())
            .await;
        assert_eq!(res.status().as_u16(), 202);
    }
    // "Error rate" fired two days ago, after all of them, and again now.
    post(&cloud, &t, -2 * 24 * 60, &alert("Error rate")).await;
    let deployment = json!({"type": "deployment", "service": "api", "environment": "production",
        "version": "v7", "status": "success"});
    post(&cloud, &t, -10, &deployment).await;
    let now = post(&cloud, &t, 0, &alert("Error rate")).await;
    let (status, answer) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        &format!("/v1/alerts/{now}/suspects"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let reasons = strings(&answer["suspects"][0]["reasons"]);
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("this alert fired before the deployment too")),
        "{answer:#}"
    );
}

/// DORA reads deployments a page at a time: every one of 1,200 counts, and a rollback across
/// a page's edge is still seen.
#[tokio::test]
async fn dora_counts_deployments_across_pages() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--signal-rate-limit", "0"]);
    let t = cloud.tenant("acme");
    for batch in 0..3 {
        let events: Vec<Value> = (0..400)
            .map(|i| {
                let n = batch * 400 + i;
                json!({"type": "deployment", "service": "api", "environment": "production",
                    "version": format!("v{n}"), "status": "success",
                    "timestamp": (base() + Duration::minutes(n)).to_rfc3339()})
            })
            .collect();
        let res = cloud
            .post_signal_text(&t, serde_json::to_string(&events).unwrap())
            .await;
        assert_eq!(res.status().as_u16(), 202);
    }
    // v1 again after v1199: a rollback of v1199, to a version 1,198 deployments back.
    let rollback = json!({"type": "deployment", "service": "api", "environment": "production",
        "version": "v1", "status": "success"});
    post(&cloud, &t, 1200, &rollback).await;
    let path = format!(
        "/v1/dora?service=api&since={}&until={}",
        urlencode(&base().to_rfc3339()),
        urlencode(&(base() + Duration::days(2)).to_rfc3339())
    );
    let (status, f) = call(&cloud, &t, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 200, "{f}");
    assert_eq!(
        f["deploymentFrequency"],
        json!({"count": 1201, "perDay": 600.5}),
        "{f:#}"
    );
    assert_eq!(f["truncated"], json!(false), "{f:#}");
    // One failure (v1199, rolled back) of 1,201 finished: small rates keep three digits.
    assert_eq!(f["changeFailRate"], json!(0.000833), "{f:#}");
}

/// This host's name when it resolves to a loopback address only (as Debian's /etc/hosts has
/// it), for a webhook name that is refused when a delivery resolves it.
fn hostname_on_loopback() -> String {
    use std::net::ToSocketAddrs;
    let out = std::process::Command::new("hostname").output().unwrap();
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let loopback = (name.as_str(), 80)
        .to_socket_addrs()
        .is_ok_and(|mut addrs| addrs.all(|a| a.ip().is_loopback()));
    assert!(
        loopback && !name.is_empty(),
        "this test needs the host name {name:?} to resolve to a loopback address (/etc/hosts)"
    );
    name
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A cloud with org `acme`, a signed-in admin, and a webhook receiver set as the org's webhook.
struct WebhookOrg {
    cloud: Cloud,
    tenant: Tenant,
    browser: reqwest::Client,
    admin: String,
    receiver: testkit::webhook::Receiver,
    /// The Notifications page that set it (it shows the signing secret once).
    page: String,
}

/// Starts [`WebhookOrg`]; `extra` are more `cloud serve` arguments (first retry after 0.2 s).
async fn org_with_webhook(extra: &[&str]) -> WebhookOrg {
    org_with_webhook_at(extra, str::to_string).await
}

/// [`org_with_webhook`] with the receiver's URL as `address` writes it.
async fn org_with_webhook_at(extra: &[&str], address: impl Fn(&str) -> String) -> WebhookOrg {
    use testkit::dashboard::{client, post as form, session};
    let mut args = vec!["--webhook-first-retry", "0.2"];
    args.extend_from_slice(extra);
    let cloud = Cloud::start_with(Backend::Sqlite, &args);
    let tenant = cloud.tenant("acme");
    let browser = client(&cloud);
    let admin = session(&cloud, &browser, "acme", "ada@example.com", "admin").await;
    let receiver = testkit::webhook::Receiver::start(0).await;
    let (status, page) = form(
        &browser,
        &cloud,
        &admin,
        "/integrations/notifications/webhook",
        &[("url", &address(&receiver.url))],
    )
    .await;
    assert_eq!(status, 200, "{page}");
    WebhookOrg {
        cloud,
        tenant,
        browser,
        admin,
        receiver,
        page,
    }
}

/// A receiver that takes the connection and never answers, in one org, holds up no other
/// org's notification: the other org's arrives while that attempt still waits for its answer.
#[tokio::test]
async fn a_receiver_that_never_answers_holds_up_no_other_org() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::AsyncReadExt;
    let WebhookOrg {
        cloud,
        tenant: acme,
        receiver,
        ..
    } = org_with_webhook(&["--webhook-allow-private"]).await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
    // Set once a request came in; `closed` once the cloud gave up on it (its time-out).
    let (asked, closed) = (
        std::sync::Arc::new(AtomicBool::new(false)),
        std::sync::Arc::new(AtomicBool::new(false)),
    );
    let (asked_by, closed_by) = (asked.clone(), closed.clone());
    let _silent = tokio::spawn(async move {
        let (mut tcp, _) = silent.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        while tcp.read(&mut buf).await.is_ok_and(|n| n > 0) {
            asked_by.store(true, Ordering::SeqCst);
        }
        closed_by.store(true, Ordering::SeqCst);
    });
    let quiet = cloud.tenant("quiet");
    cloud.admin(&[
        "webhook",
        "set",
        "--org",
        "quiet",
        "--url",
        &silent_url,
        "--webhook-allow-private",
    ]);
    // A deployment 10 minutes before an alert of the same service: a strong suspect.
    async fn strong_suspect(cloud: &Cloud, t: &Tenant) {
        let at = |minutes: i64| (Utc::now() + Duration::minutes(minutes)).to_rfc3339();
        let deploy = json!({"type": "deployment", "service": "api", "environment": "production",
            "version": "v2", "status": "success", "timestamp": at(-10)});
        let alert = json!({"type": "alert", "service": "api", "environment": "production",
            "status": "triggered", "severity": "critical", "title": "Error rate", "timestamp": at(0)});
        cloud.post_event(t, &deploy).await;
        cloud.post_event(t, &alert).await;
    }
    strong_suspect(&cloud, &quiet).await;
    testkit::wait_until("the silent receiver asked", || asked.load(Ordering::SeqCst)).await;
    strong_suspect(&cloud, &acme).await;
    receiver.wait_delivered("alert.suspect").await;
    assert!(
        !closed.load(Ordering::SeqCst),
        "the other org's notification waited for the silent receiver's time-out"
    );
}

/// A new alert whose top suspect scores at least 0.7 reaches the org's webhook, signed, with
/// the reasons; the dashboard shows the alert's suspects and the service's DORA figures.
/// In an alert storm, a strong suspect of an older alert of the window is still sent: 600
/// newer alerts (more than a page of the notifier's reads), 250 of them firing (more than it
/// examines in one round), do not hide it.
#[tokio::test]
async fn a_strong_suspect_behind_an_alert_storm_is_sent() {
    let WebhookOrg {
        cloud,
        tenant: t,
        receiver,
        ..
    } = org_with_webhook(&["--webhook-allow-private"]).await;
    let now = Utc::now();
    let at = |seconds: i64| (now + Duration::seconds(seconds)).to_rfc3339();
    let noise = |i: usize| {
        json!({"type": "alert", "service": "noise", "environment": "production",
            "status": if i < 250 { "triggered" } else { "resolved" },
            "severity": "info", "title": format!("Noise {i}"),
            "timestamp": at(-60)})
    };
    // The storm first, so that the notifier has seen it fill the window before the alert.
    for batch in [0..300, 300..600] {
        let events: Vec<Value> = batch.map(noise).collect();
        let res = cloud
            .post_signal_text(&t, Value::Array(events).to_string())
            .await;
        assert_eq!(res.status(), 202);
    }
    let deployment = cloud
        .post_event(
            &t,
            &json!({"type": "deployment", "service": "storm", "environment": "production",
                "version": "z1", "status": "success", "timestamp": at(-480)}),
        )
        .await;
    let alert = cloud
        .post_event(
            &t,
            &json!({"type": "alert", "service": "storm", "environment": "production",
                "status": "triggered", "severity": "critical", "title": "Storm",
                "timestamp": at(-120)}),
        )
        .await;
    let received = receiver.wait_delivered("alert.suspect").await;
    let hook = received
        .iter()
        .find(|r| r.body.contains("alert.suspect"))
        .unwrap();
    let body: Value = serde_json::from_str(&hook.body).unwrap();
    assert_eq!(body["alert"]["id"], alert.as_str());
    assert_eq!(body["suspect"]["event"]["id"], deployment.as_str());
}

#[tokio::test]
async fn a_strong_suspect_reaches_the_webhook_and_the_pages() {
    use testkit::dashboard::{get, post as form, session, shown_secret};
    use testkit::webhook::signature_valid;

    let WebhookOrg {
        cloud,
        tenant: t,
        browser,
        admin,
        receiver,
        page,
    } = org_with_webhook(&["--webhook-allow-private"]).await;
    let secret = shown_secret(&page);

    let now = Utc::now();
    let at = |minutes: i64| (now + Duration::minutes(minutes)).to_rfc3339();
    let mut deploy = json!({"type": "deployment", "service": "api", "environment": "production",
        "version": "v2", "status": "success", "timestamp": at(-10),
        "metadata": {"commitTimestamp": at(-70)}});
    let deployment = cloud.post_event(&t, &deploy).await;
    deploy["version"] = json!("v1");
    deploy["timestamp"] = json!(at(-600));
    cloud.post_event(&t, &deploy).await;
    // Older than the API's default period (30 days), inside the services page's 12 weeks.
    let mut old = deploy.clone();
    old["version"] = json!("v0");
    old["timestamp"] = json!(at(-50 * 1_440));
    old["metadata"] = json!({});
    cloud.post_event(&t, &old).await;
    let alert = cloud
        .post_event(
            &t,
            &json!({"type": "alert", "service": "api", "environment": "production",
        "status": "triggered", "severity": "critical", "title": "Error rate", "timestamp": at(0)}),
        )
        .await;

    let received = receiver.wait_delivered("alert.suspect").await;
    let hook = received
        .iter()
        .find(|r| r.body.contains("alert.suspect"))
        .unwrap();
    assert!(signature_valid(&secret, &hook.signature, &hook.body));
    let body: Value = serde_json::from_str(&hook.body).unwrap();
    assert_eq!(body["alert"]["id"], alert.as_str());
    assert_eq!(body["suspect"]["event"]["id"], deployment.as_str());
    assert!(body["suspect"]["score"].as_f64().unwrap() >= 0.7, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("deployed 10 min before the alert"),
        "{body}"
    );

    let (status, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("Suspects") && page.contains(&deployment) && page.contains("same service"),
        "{page}"
    );
    // Its time in the form of every other time of the dashboard.
    assert!(page.contains(" UTC</span>"), "{page}");
    let asked = Utc::now();
    let (status, page) = get(
        &browser,
        format!("{}/services/api?environment=production", cloud.https),
        &admin,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<svg") && page.contains("Deployment frequency") && page.contains("60 min"),
        "{page}"
    );
    // Its weeks are calendar weeks, each labelled with its Monday: the last is this week's
    // (the week of the page's request or, across midnight on a Sunday, of the moment after).
    let monday = |at: DateTime<Utc>| {
        let day = at.date_naive();
        day - Duration::days(i64::from(day.weekday().num_days_from_monday()))
    };
    let (before, after) = (monday(asked), monday(Utc::now()));
    assert!(
        page.contains(&format!("{before}: ")) || page.contains(&format!("{after}: ")),
        "{before} in {page}"
    );
    // The API call the page quotes gives the page's figures.
    let quoted = |page: &str| {
        page.split("<code>GET ")
            .nth(1)
            .and_then(|rest| rest.split("</code>").next())
            .unwrap()
            .replace("&amp;", "&")
            .replace("&#38;", "&")
    };
    let (_, figures) = call(&cloud, &t, reqwest::Method::GET, &quoted(&page), None).await;
    assert_eq!(figures["deploymentFrequency"]["count"], 3, "{figures}");
    // Quoted in the API's precision: whole milliseconds.
    let until = quoted(&page).split("until=").nth(1).unwrap().to_string();
    let fraction = until.split('.').nth(1).unwrap_or_default();
    assert_eq!(fraction.len(), 4, "{until}");
    assert!(fraction.ends_with('Z'), "{until}");
    // A name a query would split or change is quoted percent-encoded, so it reads back as is.
    let (status, odd) = get(
        &browser,
        format!("{}/services/c%2B%2B%20a%26b", cloud.https),
        &admin,
    )
    .await;
    assert_eq!(status, 200);
    assert!(quoted(&odd).contains("service=c%2B%2B+a%26b&"), "{odd}");
    let (status, figures) = call(&cloud, &t, reqwest::Method::GET, &quoted(&odd), None).await;
    assert_eq!(status, 200, "{figures}");
    assert!(page.contains("3 ("), "{page}");
    // A name no event gives (here in another case) says so, rather than reading as an idle
    // service; the path in the hint is encoded as a path.
    assert!(!page.contains("No event names this service"), "{page}");
    assert!(
        odd.contains("No event names this service")
            && odd.contains("/v1/services/c%2B%2B%20a%26b/dependencies"),
        "{odd}"
    );
    let (_, upper) = get(&browser, format!("{}/services/API", cloud.https), &admin).await;
    assert!(upper.contains("No event names this service"), "{upper}");
    // An alert chosen as the cause is said as such.
    let (status, said) = form(
        &browser,
        &cloud,
        &admin,
        &format!("/events/{alert}/cause"),
        &[("deployment", &alert)],
    )
    .await;
    assert_eq!(status, 422);
    assert!(
        said.contains("The event chosen as the cause is an alert, not a deployment."),
        "{said}"
    );
    // An admin confirms the cause on the alert's page: the page says so, and the change fail
    // rate counts it (one of the two deployments).
    let (status, _) = form(
        &browser,
        &cloud,
        &admin,
        &format!("/events/{alert}/cause"),
        &[("deployment", &deployment)],
    )
    .await;
    assert_eq!(status, 303);
    let (_, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert!(page.contains("confirmed cause"), "{page}");
    assert!(
        page.contains("<h1>Alert: "),
        "the alert's title heads its page: {page}"
    );
    // Withdrawn on the page (a mis-click), then confirmed again.
    let withdraw = format!("/events/{alert}/cause/withdraw");
    let (status, to) = testkit::dashboard::post_to(&browser, &cloud, &admin, &withdraw, &[]).await;
    assert_eq!(status, 303);
    assert!(to.contains("done=cause-withdrawn"), "{to}");
    let (_, page) = get(&browser, format!("{}{to}", cloud.https), &admin).await;
    assert!(!page.contains("confirmed cause"), "{page}");
    assert!(!page.contains("Confirm as the cause instead"), "{page}");
    // Said on the page it leads back to, for a screen reader too.
    assert!(
        page.contains("role=\"status\">Confirmation withdrawn: the deployment no longer counts"),
        "{page}"
    );
    // The same form again (sent twice): nothing to withdraw, and the page says so.
    let (status, to) = testkit::dashboard::post_to(&browser, &cloud, &admin, &withdraw, &[]).await;
    assert_eq!(status, 303);
    let (_, page) = get(&browser, format!("{}{to}", cloud.https), &admin).await;
    assert!(
        page.contains("role=\"status\">Nothing withdrawn: no confirmed cause to withdraw"),
        "{page}"
    );
    // A cause confirmed through the API that is no suspect (three days before the alert) is
    // shown apart, and withdrawn there (in staging, so that production's figures stay).
    deploy["environment"] = json!("staging");
    deploy["version"] = json!("v0");
    deploy["timestamp"] = json!(at(-3 * 24 * 60));
    let far = cloud.post_event(&t, &deploy).await;
    let (status, body) = call(
        &cloud,
        &t,
        reqwest::Method::POST,
        &format!("/v1/alerts/{alert}/cause"),
        Some(json!({"deploymentId": far})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert!(
        page.contains("not among the suspects below")
            && page.contains(&format!("href=\"/events/{far}\""))
            && page.contains("Withdraw the confirmation"),
        "{page}"
    );
    // Confirming a suspect now would replace it: the suspect's button says so, and what.
    assert!(
        page.contains("Confirm as the cause instead")
            && page.contains("<span class=\"hint\">replaces deployment · api · v0"),
        "{page}"
    );
    let (status, _) = form(&browser, &cloud, &admin, &withdraw, &[]).await;
    assert_eq!(status, 303);
    let (_, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert!(!page.contains("confirmed cause"), "{page}");
    // An id that is no event of the org (another org's, or made up) says so.
    let nowhere = "/events/01a00000-0000-7000-8000-000000000000/cause/withdraw";
    let (status, page) = form(&browser, &cloud, &admin, nowhere, &[]).await;
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("No such alert"), "{page}");
    let (status, _) = form(
        &browser,
        &cloud,
        &admin,
        &format!("/events/{alert}/cause"),
        &[("deployment", &deployment)],
    )
    .await;
    assert_eq!(status, 303);
    let (_, dora) = call(
        &cloud,
        &t,
        reqwest::Method::GET,
        "/v1/dora?service=api&environment=production",
        None,
    )
    .await;
    assert_eq!(dora["changeFailRate"], json!(0.5), "{dora}");
    let member = session(&cloud, &browser, "acme", "max@example.com", "member").await;
    let (status, _) = form(
        &browser,
        &cloud,
        &member,
        &format!("/events/{alert}/cause"),
        &[("deployment", &deployment)],
    )
    .await;
    assert_eq!(status, 403, "members read");
    let (status, _) = form(&browser, &cloud, &member, &withdraw, &[]).await;
    assert_eq!(status, 403, "members do not withdraw");
    // Declared dependencies are shown on the service's page.
    call(
        &cloud,
        &t,
        reqwest::Method::PUT,
        "/v1/services/api/dependencies",
        Some(json!({"dependencies": ["payments-api"]})),
    )
    .await;
    let (_, page) = get(&browser, format!("{}/services/api", cloud.https), &admin).await;
    assert!(page.contains("href=\"/services/payments-api\""), "{page}");
    // Suspects that cannot be read (storage failing) are a page saying so, not an alert
    // shown without suspects as if there were none.
    cloud.exec_sql("ALTER TABLE service_dependencies RENAME TO service_dependencies_gone");
    let (status, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert_eq!(status, 503, "{page}");
    assert!(page.contains("Storage unavailable"), "{page}");
    cloud.exec_sql("ALTER TABLE service_dependencies_gone RENAME TO service_dependencies");
    let (status, page) = get(&browser, format!("{}/events/{alert}", cloud.https), &admin).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Suspects"), "{page}");
}

/// Many concurrent batches of deployments of the same services (PostgreSQL's two writers
/// commit groups side by side, both updating the services' newest deployments): every batch
/// is stored, and the Services page shows each service's newest deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deployments_of_the_same_services_all_commit_postgres() {
    use testkit::dashboard::{client, get, session};
    let cloud = Cloud::start_with(Backend::Postgres, &["--signal-rate-limit", "0"]);
    let t = cloud.tenant("acme");
    // Event i of batch `round` of task `task`: its service, environment and minute.
    let event = |task: usize, round: usize, i: usize| {
        let service = format!("svc-{}", (i * 7 + task * 3 + round) % 40);
        let environment = ["production", "staging", "dev"][i % 3];
        (service, environment, round * 1000 + task * 100 + i % 100)
    };
    let mut newest: HashMap<(String, &str), usize> = HashMap::new();
    for task in 0..8 {
        for round in 0..15 {
            for i in 0..500 {
                let (s, e, minute) = event(task, round, i);
                let head = newest.entry((s, e)).or_insert(0);
                *head = (*head).max(minute);
            }
        }
    }
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (url, key, http) = (
            format!("{}/v1/signals/{}", cloud.http, t.signal_key),
            t.api_key.clone(),
            cloud.client(),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..15 {
                // Each batch names the services in another order.
                let batch: Vec<Value> = (0..500)
                    .map(|i| {
                        let (service, environment, minute) = event(task, round, i);
                        json!({"type": "deployment", "service": service,
                            "environment": environment, "status": "success",
                            "version": format!("v{minute}"),
                            "timestamp": (base() + Duration::minutes(minute as i64)).to_rfc3339()})
                    })
                    .collect();
                let res = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&batch)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let browser = client(&cloud);
    let member = session(&cloud, &browser, "acme", "max@example.com", "member").await;
    let (_, page) = get(&browser, format!("{}/services", cloud.https), &member).await;
    // One row per service and environment, each with its newest version.
    assert_eq!(
        page.matches("<tr><td><a href=\"/services/").count(),
        newest.len(),
        "{page}"
    );
    for ((service, environment), minute) in &newest {
        let row = format!(">{service}</a></td><td>{environment}</td><td>v{minute}</td>");
        assert!(page.contains(&row), "no {row} in {page}");
    }
}

/// Without `--webhook-allow-private`, a webhook on a loopback address is never called: a
/// literal one is refused when it is set, a name that resolves to one at delivery, where the
/// Notifications page shows why, and the receiver gets nothing.
#[tokio::test]
async fn webhooks_reach_public_addresses_only_by_default() {
    use testkit::dashboard::{get, post as form};

    // A name that only resolves to loopback when a delivery looks it up: the host's own.
    let name = hostname_on_loopback();
    let WebhookOrg {
        cloud,
        tenant: t,
        browser,
        admin,
        receiver,
        ..
    } = org_with_webhook_at(&[], |url| url.replace("127.0.0.1", &name)).await;
    // A loopback address, or `localhost`, is refused when set.
    for (url, said) in [
        (
            receiver.url.clone(),
            "Webhook URL not valid: 127.0.0.1 is not a public address",
        ),
        (
            receiver.url.replace("127.0.0.1", "localhost"),
            "Webhook URL not valid: localhost (a loopback name) is not a public address",
        ),
    ] {
        let (status, page) = form(
            &browser,
            &cloud,
            &admin,
            "/integrations/notifications/webhook",
            &[("url", &url)],
        )
        .await;
        assert_eq!(status, 422, "{page}");
        assert!(page.contains(said), "{page}");
    }
    let now = Utc::now();
    cloud.post_event(&t, &json!({"type": "deployment", "service": "api", "environment": "production",
        "status": "success", "version": "v2", "timestamp": (now - Duration::minutes(5)).to_rfc3339()})).await;
    cloud.post_event(&t, &json!({"type": "alert", "service": "api", "environment": "production",
        "status": "triggered", "severity": "critical", "title": "Errors", "timestamp": now.to_rfc3339()})).await;
    let url = format!("{}/integrations/notifications", cloud.https);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, page) = get(&browser, url.clone(), &admin).await;
        if page.contains("not a public address") {
            assert!(page.contains("--webhook-allow-private"), "{page}");
            // The refusal itself, not wrapped as a failed lookup: the name resolved.
            assert!(!page.contains("dns error"), "{page}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal shown: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        receiver.received().is_empty(),
        "a loopback webhook was called"
    );
    // A member sees why, but not the URL's path (it often holds a token); nor does the log.
    let member =
        testkit::dashboard::session(&cloud, &browser, "acme", "max@example.com", "member").await;
    let (_, page) = get(&browser, url, &member).await;
    assert!(page.contains("not a public address"), "{page}");
    assert!(
        !page.contains("/hook"),
        "the webhook's path shown to a member: {page}"
    );
    let failed = cloud.wait_log_line("webhook delivery failed");
    assert!(
        !failed.contains("/hook"),
        "the webhook's path logged: {failed}"
    );
}
