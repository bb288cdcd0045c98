//! The dashboard's pages through the real binary: an admin creates a signal key and an API key
//! on Integrations → Signals, a `curl`-like client posts an event with them, the timeline and
//! the event's page show it, and a key revoked on the page stops working at once. A
//! member reads but cannot create (403), and no one sees another org's events.

use testkit::dashboard::{client, get, post, session};
use testkit::{Backend, Cloud, seed_event};

/// The key shown once on a "created" page.
fn shown_key(page: &str) -> String {
    testkit::dashboard::shown_secret(page)
}

#[tokio::test]
async fn an_admin_makes_keys_that_post_events_the_timeline_shows() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;

    let (status, page) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/create",
        &[("kind", "signal-key"), ("name", "ci")],
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let signal_key = shown_key(&page);
    assert!(signal_key.starts_with("sigkey_"), "{signal_key}");
    let (status, page) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/create",
        &[("kind", "api-key"), ("name", "deploys")],
    )
    .await;
    assert_eq!(status, 200);
    let api_key = shown_key(&page);
    assert!(
        api_key.starts_with("sigapi_") && page.contains("shown this once"),
        "{page}"
    );
    assert!(page.contains("GitHub Actions") && page.contains("GitLab CI"));

    // The keys work for the API, as the page's curl uses them.
    let mut event = seed_event();
    event["service"] = "checkout".into();
    let posted = client
        .post(format!("{}/v1/signals/{signal_key}", cloud.http))
        .bearer_auth(&api_key)
        .json(&event)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 202);
    let id = posted.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    let (status, timeline) = get(
        &client,
        format!("{}/events?type=deployment&service=checkout", cloud.https),
        &admin,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        timeline.contains("checkout") && timeline.contains(&id),
        "{timeline}"
    );
    let (_, none) = get(
        &client,
        format!("{}/events?service=nothing-here", cloud.https),
        &admin,
    )
    .await;
    assert!(none.contains("No events match."));
    let (status, detail) = get(&client, format!("{}/events/{id}", cloud.https), &admin).await;
    assert_eq!(status, 200);
    assert!(
        detail.contains("&#34;service&#34;: &#34;checkout&#34;"),
        "{detail}"
    );

    // The list shows the key's public id, never the secret; revoking it ends it within 2 s.
    let (_, list) = get(
        &client,
        format!("{}/integrations/signals", cloud.https),
        &admin,
    )
    .await;
    let public_id: String = api_key.split('_').take(2).collect::<Vec<_>>().join("_");
    assert!(list.contains(&public_id) && !list.contains(&api_key));
    // Revoking asks first; the question revokes nothing. A whole key pasted as the id is
    // asked about by its public part: its secret is not echoed.
    let (status, question) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/revoke",
        &[("kind", "api-key"), ("id", &api_key)],
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        question.contains(&format!("Revoke API key {public_id}?"))
            && question.contains(&format!("name=\"id\" value=\"{public_id}\"")),
        "{question}"
    );
    assert!(!question.contains(&api_key), "{question}");
    let key_works = || async {
        let res = client
            .get(format!("{}/v1/events", cloud.http))
            .bearer_auth(&api_key)
            .send()
            .await
            .unwrap();
        res.status()
    };
    assert_eq!(key_works().await, 200, "asked, not revoked");
    let (status, _) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/revoke",
        &[("kind", "api-key"), ("id", &public_id), ("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 303);
    // This server stops accepting it at once (the dashboard empties its verified-key cache).
    assert_eq!(key_works().await, 401, "the revoked key still works");
}

#[tokio::test]
async fn members_read_but_cannot_manage_and_orgs_are_isolated() {
    let cloud = Cloud::start(Backend::Sqlite);
    let acme = cloud.tenant("acme");
    cloud.admin(&["org", "create", "globex"]);
    let client = client(&cloud);
    let member = session(&cloud, &client, "acme", "max@example.com", "member").await;
    let outsider = session(&cloud, &client, "globex", "eve@example.com", "admin").await;

    let (status, page) = get(
        &client,
        format!("{}/integrations/signals", cloud.https),
        &member,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        page.contains(&acme.signal_key),
        "members see the org's signal keys"
    );
    assert!(
        !page.contains("Create an API key"),
        "no admin form for a member"
    );
    let (status, page) = post(
        &client,
        &cloud,
        &member,
        "/integrations/signals/create",
        &[("kind", "api-key")],
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        page.contains("Admins only") && page.contains("<nav aria-label=\"Main\">"),
        "{page}"
    );

    let posted = client
        .post(format!("{}/v1/signals/{}", cloud.http, acme.signal_key))
        .bearer_auth(&acme.api_key)
        .json(&seed_event())
        .send()
        .await
        .unwrap();
    let id = posted.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = get(&client, format!("{}/events/{id}", cloud.https), &member).await;
    assert_eq!(status, 200);
    let (status, _) = get(&client, format!("{}/events/{id}", cloud.https), &outsider).await;
    assert_eq!(status, 404, "another org's event");
    let (_, timeline) = get(&client, format!("{}/events", cloud.https), &outsider).await;
    assert!(!timeline.contains(&id));
    let (_, keys) = get(
        &client,
        format!("{}/integrations/signals", cloud.https),
        &outsider,
    )
    .await;
    assert!(!keys.contains(&acme.signal_key));
}

/// The script and the stylesheet are checked again at each use (an `ETag`, then `304`), so
/// a browser never keeps the previous release's script after an upgrade.
#[tokio::test]
async fn assets_are_revalidated_not_kept() {
    let cloud = Cloud::start(Backend::Sqlite);
    let client = cloud.client();
    for asset in ["/assets/live.js", "/assets/app.css"] {
        let url = format!("{}{asset}", cloud.https);
        let res = client.get(&url).send().await.unwrap();
        assert_eq!(res.status(), 200, "{asset}");
        assert_eq!(res.headers()["cache-control"], "no-cache", "{asset}");
        let etag = res.headers()["etag"].to_str().unwrap().to_string();
        assert!(!res.text().await.unwrap().is_empty());
        let again = client
            .get(&url)
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{asset}");
        let other = client
            .get(&url)
            .header("if-none-match", "\"an-older-release\"")
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), 200, "{asset}");
    }
}
