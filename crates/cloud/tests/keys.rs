//! Key management from the CLI: list (ids, never secrets; text and JSON), last use, and
//! revocation that a running server honours within seconds (it polls each second) despite its
//! 30 s key cache.
//! Real `cloud`, on SQLite and PostgreSQL.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use testkit::{Backend, Cloud, on_both_backends, seed_event};

on_both_backends!(keys_are_listed_used_and_revoked);

async fn post_status(cloud: &Cloud, signal_key: &str, api_key: &str) -> StatusCode {
    cloud
        .client()
        .post(format!("{}/v1/signals/{signal_key}", cloud.http))
        .bearer_auth(api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap()
        .status()
}

fn list(cloud: &Cloud, what: &str) -> Vec<Value> {
    let out = cloud.admin(&[what, "list", "--org", "acme", "--output", "json"]);
    serde_json::from_str::<Value>(&out)
        .unwrap_or_else(|e| panic!("{what} list: {e}: {out}"))
        .as_array()
        .unwrap()
        .clone()
}

/// Polls `check` until it holds, failing after `within`.
async fn within<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn keys_are_listed_used_and_revoked(backend: Backend) {
    let cloud = Cloud::start(backend);
    let t = cloud.tenant("acme");
    let laptop = cloud.admin(&[
        "api-key",
        "create",
        "--org",
        "acme",
        "--name",
        "laptop-of-the-release-manager",
    ]);
    cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);

    let orgs: Value =
        serde_json::from_str(&cloud.admin(&["org", "list", "--output", "json"])).unwrap();
    assert_eq!(orgs[0]["slug"], "acme");
    // The id a bridge's audit records name the org by.
    assert!(
        orgs[0]["id"]
            .as_str()
            .is_some_and(|id| id.parse::<i64>().is_ok()),
        "{orgs}"
    );

    let keys = list(&cloud, "api-key");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let id_of = |key: &str| key.rsplit_once('_').unwrap().0.to_string();
    assert_eq!(keys[0]["id"], id_of(&t.api_key).as_str());
    assert_eq!(keys[1]["id"], id_of(&laptop).as_str());
    assert_eq!(keys[1]["name"], "laptop-of-the-release-manager");
    assert!(keys[0]["lastUsedAt"].is_null());
    let created = keys[0]["createdAt"].as_str().unwrap();
    assert!(created.len() == 24 && created.ends_with('Z'), "{created}");
    // Never a secret, in either format.
    let text = cloud.admin(&["api-key", "list", "--org", "acme"]);
    assert!(text.starts_with("id"), "{text}");
    assert!(text.contains("laptop") && text.contains("never"), "{text}");
    // Aligned whatever a name's length: every date starts under "created".
    let created_at = text.lines().next().unwrap().find("created").unwrap();
    for line in text.lines().skip(1) {
        assert!(line[created_at..].starts_with("20"), "{text}");
    }
    for secret in [&t.api_key, &laptop] {
        let secret_part = secret.rsplit_once('_').unwrap().1;
        assert!(!text.contains(secret_part) && !keys[0].to_string().contains(secret_part));
    }
    // An org with none says so, and how to make one, rather than printing a bare header.
    cloud.admin(&["org", "create", "empty"]);
    let none = cloud.admin(&["bridge-token", "list", "--org", "empty"]);
    assert!(
        none.contains("no live bridge tokens in org \"empty\"")
            && none.contains("cloud bridge-token create --name BRIDGE --org empty"),
        "{none}"
    );
    let tokens = list(&cloud, "bridge-token");
    assert_eq!(tokens[0]["name"], "dc1");
    assert!(tokens[0]["id"].as_str().unwrap().starts_with("sigbrt_"));
    assert_eq!(list(&cloud, "signal-key")[0]["id"], t.signal_key.as_str());

    // Use records the last use.
    assert_eq!(cloud.events_status(&laptop).await, StatusCode::OK);
    assert_eq!(
        post_status(&cloud, &t.signal_key, &t.api_key).await,
        StatusCode::ACCEPTED
    );
    within(Duration::from_secs(5), "lastUsedAt", || async {
        list(&cloud, "api-key")[1]["lastUsedAt"].is_string()
            && list(&cloud, "signal-key")[0]["lastUsedAt"].is_string()
    })
    .await;

    // Revoked from the CLI while the server has the key cached: refused within seconds, not after 30.
    let revoked = cloud.admin(&["api-key", "revoke", "--org", "acme", &id_of(&laptop)]);
    assert!(revoked.contains("revoked"), "{revoked}");
    within(Duration::from_secs(5), "API key revocation", || async {
        cloud.events_status(&laptop).await == StatusCode::UNAUTHORIZED
    })
    .await;
    assert_eq!(list(&cloud, "api-key").len(), 1);
    assert_eq!(cloud.events_status(&t.api_key).await, StatusCode::OK);

    cloud.admin(&["signal-key", "revoke", "--org", "acme", &t.signal_key]);
    within(Duration::from_secs(5), "signal key revocation", || async {
        post_status(&cloud, &t.signal_key, &t.api_key).await == StatusCode::NOT_FOUND
    })
    .await;

    // An id that is not the org's live key is a usage error naming it.
    let out = cloud.admin_output(&["api-key", "revoke", "--org", "acme", &id_of(&laptop)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no live key"));
}

/// A key revoked by a process whose clock is behind (its stamp older than the latest
/// revocation) is refused within seconds too, though the latest revocation time did not change.
#[tokio::test]
async fn a_revocation_stamped_in_the_past_takes_effect() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.tenant("acme");
    let first = cloud.admin(&["api-key", "create", "--org", "acme", "--name", "first"]);
    let ci = cloud.admin(&["api-key", "create", "--org", "acme", "--name", "ci"]);
    assert_eq!(cloud.events_status(&first).await, StatusCode::OK);
    assert_eq!(cloud.events_status(&ci).await, StatusCode::OK);
    let id_of = |key: &str| key.rsplit_once('_').unwrap().0.to_string();
    cloud.admin(&["api-key", "revoke", "--org", "acme", &id_of(&first)]);
    // Refused: the server has seen that revocation (the key was cached).
    within(Duration::from_secs(5), "the first revocation", || async {
        cloud.events_status(&first).await == StatusCode::UNAUTHORIZED
    })
    .await;
    assert_eq!(cloud.events_status(&ci).await, StatusCode::OK);
    cloud.exec_sql(&format!(
        "UPDATE api_keys SET revoked_at = 1 WHERE id = '{}'",
        id_of(&ci).trim_start_matches("sigapi_")
    ));
    within(
        Duration::from_secs(5),
        "a revocation stamped in the past",
        || async { cloud.events_status(&ci).await == StatusCode::UNAUTHORIZED },
    )
    .await;
}

/// One kind of credential given where another belongs is named as such, and a secret that
/// went into a URL is not echoed back.
#[tokio::test]
async fn a_credential_of_another_kind_is_named_not_echoed() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let detail = |res: reqwest::Response| async move {
        let body: Value = res.json().await.unwrap();
        body["detail"].as_str().unwrap_or_default().to_string()
    };

    // The API key where the signal key goes.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/{}", cloud.http, t.api_key))
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let said = detail(res).await;
    assert!(
        said.contains("the URL holds an API key, not a signal key"),
        "{said}"
    );
    assert!(!said.contains(&t.api_key), "the key was echoed: {said}");

    // The signal key, or the bridge token, as the API key.
    for (wrong, named) in [(&t.signal_key, "a signal key"), (&token, "a bridge token")] {
        let res = cloud
            .client()
            .get(format!("{}/v1/events", cloud.http))
            .bearer_auth(wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        let said = detail(res).await;
        assert!(
            said.starts_with(&format!("that is {named}, not an API key")),
            "{said}"
        );
    }

    // No signal key in the URL: a shell variable that was empty.
    let res = cloud
        .client()
        .post(format!("{}/v1/signals/", cloud.http))
        .bearer_auth(&t.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let said = detail(res).await;
    assert!(said.starts_with("the URL has no signal key"), "{said}");

    // `Bearer` with nothing after it: a shell variable that was empty.
    let res = cloud
        .client()
        .get(format!("{}/v1/events", cloud.http))
        .header("authorization", "Bearer ")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let said = detail(res).await;
    assert!(said.contains("says Bearer but carries no key"), "{said}");

    // The API key as a bridge token, with the scheme's word in any case (as for API keys);
    // two Authorization headers are refused, as a proxy in front could read the other one.
    let enroll = |authorizations: &[String]| {
        let mut request = cloud
            .client()
            .post(format!("{}/v1/bridge/enroll", cloud.https))
            .body("not read");
        for value in authorizations {
            request = request.header("authorization", value);
        }
        request.send()
    };
    for scheme in ["Bearer", "bearer"] {
        let res = enroll(&[format!("{scheme} {}", t.api_key)]).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        let said = detail(res).await;
        assert!(
            said.starts_with("that is an API key, not a bridge token"),
            "{said}"
        );
    }
    let two = [format!("Bearer {}", t.api_key), "Bearer sigbrt_x".into()];
    let res = enroll(&two).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let said = detail(res).await;
    assert!(
        said.starts_with("more than one Authorization header"),
        "{said}"
    );

    // `revoke` given a whole credential: another kind is named and not echoed; a whole API key
    // is revoked by its id, and its secret reaches neither the output nor the audit log.
    let secret_of = |key: &str| key.rsplit_once('_').unwrap().1.to_string();
    for (command, whole, named) in [
        ("signal-key", &t.api_key, "an API key"),
        ("api-key", &token, "a bridge token"),
        ("api-key", &t.signal_key, "a signal key"),
    ] {
        let out = cloud.admin_output(&[command, "revoke", "--org", "acme", whole]);
        assert_eq!(out.status.code(), Some(2));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(&format!("(that is {named}")), "{said}");
        assert!(
            !said.contains(&secret_of(whole)),
            "the secret was echoed: {said}"
        );
    }
    let ci = cloud.admin(&["api-key", "create", "--org", "acme", "--name", "ci"]);
    let (id, secret) = ci.rsplit_once('_').unwrap();
    // Run as a service would run it: no USER or LOGNAME.
    let out = cloud
        .admin_command(&[
            "api-key",
            "revoke",
            "--org",
            "acme",
            &ci,
            "--log-level",
            "info",
        ])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("revoked {id}")
    );
    // The audit entry is a JSON line on stderr, its actor the user id.
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("api_key.revoke") && log.contains(id), "{log}");
    let uid = rustix::process::getuid().as_raw();
    assert!(
        log.contains(&format!("\"actor\":\"cli:uid={uid}\"")),
        "{log}"
    );
    assert!(
        !log.contains(secret),
        "the secret reached the audit log: {log}"
    );
    within(
        Duration::from_secs(5),
        "revocation by the whole key",
        || async { cloud.events_status(&ci).await == StatusCode::UNAUTHORIZED },
    )
    .await;
}
