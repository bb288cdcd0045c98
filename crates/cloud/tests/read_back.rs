//! Every event that is accepted reads back, and one that cannot (storage damage) never takes a
//! page of the org's events down with it. Real `cloud`, SQLite and PostgreSQL.

use reqwest::StatusCode;
use serde_json::Value;
use testkit::{Backend, Cloud, Tenant, on_both_backends};

on_both_backends!(
    nesting_at_the_limit_is_accepted_and_reads_back,
    an_unreadable_row_is_listed_apart_and_the_page_is_served,
);

async fn post_text(cloud: &Cloud, t: &Tenant, body: String) -> (StatusCode, Value) {
    let res = cloud.post_signal_text(t, body).await;
    (res.status(), res.json().await.unwrap_or(Value::Null))
}

async fn get(cloud: &Cloud, t: &Tenant, path: &str) -> (StatusCode, Value) {
    let res = cloud
        .client()
        .get(format!("{}{path}", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap();
    (res.status(), res.json().await.unwrap_or(Value::Null))
}

fn custom_event(nesting: usize) -> String {
    let deep = format!("{}1{}", "[".repeat(nesting), "]".repeat(nesting));
    format!(r#"{{"type":"custom","name":"deep","value":{deep}}}"#)
}

async fn nesting_at_the_limit_is_accepted_and_reads_back(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let (status, body) = post_text(&cloud, &t, custom_event(124)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap();
    let (status, event) = get(&cloud, &t, &format!("/v1/events/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{event}");
    assert_eq!(event["name"], "deep");
    let (status, page) = get(&cloud, &t, "/v1/events").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["events"][0]["id"], id);
    // One level more would be stored unreadable: it is refused up front.
    let (status, problem) = post_text(&cloud, &t, custom_event(125)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("nests deeper than 124 levels"),
        "{problem}"
    );
}

async fn an_unreadable_row_is_listed_apart_and_the_page_is_served(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let mut ids = Vec::new();
    for n in 0..3 {
        let (status, body) = post_text(&cloud, &t, custom_event(n)).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    // Two deployments and an alert after them: the alert's suspects.
    let mut posted = Vec::new();
    for body in [
        r#"{"type":"deployment","service":"api","environment":"production","status":"success","version":"v1"}"#,
        r#"{"type":"deployment","service":"api","environment":"production","status":"success","version":"v2"}"#,
        r#"{"type":"alert","service":"api","environment":"production","status":"triggered","severity":"critical","title":"Errors"}"#,
    ] {
        let (status, body) = post_text(&cloud, &t, body.to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        posted.push(body["id"].as_str().unwrap().to_string());
    }
    // Damage the middle one's stored body behind the server's back.
    let sql = format!(
        "UPDATE events SET body = '{{\"broken' WHERE id IN ('{}', '{}')",
        ids[1], posted[0]
    );
    match &cloud.pg {
        Some(schema) => schema.exec(&sql),
        None => {
            use sqlx::Connection;
            let path = cloud.data_dir.path().join("signals.db");
            let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut db)
                .await
                .unwrap();
        }
    }
    let (status, page) = get(&cloud, &t, "/v1/events").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 4, "{page}");
    assert!(listed.contains(&ids[0].as_str()) && listed.contains(&ids[2].as_str()));
    let unreadable: Vec<&str> = page["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert!(
        unreadable.len() == 2 && unreadable.contains(&ids[1].as_str()),
        "{page}"
    );
    // The alert's suspects: the damaged deployment is listed apart, the other still ranked.
    let (status, suspects) = get(&cloud, &t, &format!("/v1/alerts/{}/suspects", posted[2])).await;
    assert_eq!(status, StatusCode::OK, "{suspects}");
    assert_eq!(
        suspects["suspects"][0]["event"]["id"],
        posted[1].as_str(),
        "{suspects}"
    );
    assert_eq!(
        suspects["suspects"].as_array().unwrap().len(),
        1,
        "{suspects}"
    );
    assert_eq!(
        suspects["unreadable"][0]["id"],
        posted[0].as_str(),
        "{suspects}"
    );
    cloud.wait_log_line(&ids[1]);
    let (status, problem) = get(&cloud, &t, &format!("/v1/events/{}", ids[1])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(problem["detail"].as_str().unwrap().contains(&ids[1]));
}

/// A database that stops answering is said in the log once, with where it is and why (the
/// requests themselves see only a pool that timed out; the background tasks' own failures are
/// not repeated at every poll), and once again when it answers. A shutdown while it does not
/// answer exits within the drain timeout all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stops_answering_is_said_with_why_and_when_it_is_back() {
    let schema = testkit::PgSchema::create();
    let mut url = url::Url::parse(&schema.url).unwrap();
    let target = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let relay = testkit::freeze::FreezingRelay::start(target.parse().unwrap()).await;
    url.set_port(Some(relay.addr.port())).unwrap();
    let mut cloud = Cloud::start_on_url(url.to_string(), &["--drain-timeout", "2"]);
    let t = cloud.tenant("acme");
    // The first line says which release runs on which database (never its password).
    let starting = cloud.wait_log_line("cloud starting");
    assert!(
        starting.contains(&format!("127.0.0.1:{}", relay.addr.port()))
            && starting.contains(&format!("\"version\":\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{starting}"
    );
    relay.freeze(true);
    let within = std::time::Duration::from_secs(20);
    let lost = cloud.wait_log_line_within("the database does not answer", within);
    assert!(
        lost.contains(&format!("127.0.0.1:{}", relay.addr.port()))
            && lost.contains("a new connection is not made within 3 s"),
        "{lost}"
    );
    // A request meanwhile waits for a connection, then gets its 503; the revocation poll
    // (every second) failed all along, and said nothing more than the one line above.
    let (status, _) = get(&cloud, &t, "/v1/events").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let log = cloud.log_text();
    let after = &log[log.find("the database does not answer").unwrap()..];
    assert!(
        !after.contains("cannot check for revoked keys"),
        "repeated while the database is known down: {after}"
    );
    relay.freeze(false);
    let back = cloud.wait_log_line_within("the database answers again", within);
    assert!(back.contains(&relay.addr.port().to_string()), "{back}");

    // Frozen again: SIGTERM still ends the process soon after the drain timeout (2 s), with
    // a last line that says whether storage was flushed. (A query caught mid-flight by the
    // freeze would wait for ever; whether one is depends on timing, so either line may come.)
    relay.freeze(true);
    let (status, _) = get(&cloud, &t, "/v1/events").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let asked = std::time::Instant::now();
    cloud.signal("TERM");
    let code = cloud.wait();
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(15),
        "stopped after {:?}",
        asked.elapsed()
    );
    // Exit 1 when storage could not be flushed, so that a supervisor sees it.
    let log = cloud.log_text();
    let flushed = log.contains("stopped: in-flight requests drained, storage flushed");
    let unflushed = log.contains("storage was not flushed");
    assert!(flushed != unflushed, "{log}");
    assert_eq!(code, Some(if flushed { 0 } else { 1 }), "{log}");
}
