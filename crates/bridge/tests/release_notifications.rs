//! Bridge release notifications end to end: a real bridge older than the release the cloud
//! ships (`--bridge-release`) makes the org's webhook receive a signed `bridge.outdated` POST,
//! retried after a failure; subscribed users see a notice on every page; and a cloud restarted
//! with a newer release announces it (`bridge.release`).

use serde_json::Value;
use testkit::bridge::Rig;
use testkit::dashboard::{client, get, post, session, shown_secret};
use testkit::webhook::{Receiver, signature_valid};
use testkit::{Backend, Cloud};

const RELEASE: &str = "9.9.9";

/// Sets the org's webhook to `url` from the dashboard: the signing secret shown once.
async fn set_webhook(cloud: &Cloud, client: &reqwest::Client, admin: &str, url: &str) -> String {
    let (status, page) = post(
        client,
        cloud,
        admin,
        "/integrations/notifications/webhook",
        &[("url", url)],
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let secret = shown_secret(&page);
    assert!(secret.starts_with("whsec_"), "{secret}");
    secret
}

#[tokio::test]
async fn an_outdated_bridge_reaches_the_webhook_signed_and_retried_and_the_notice() {
    let rig = Rig::start_with_cloud_args(&[
        "--bridge-release",
        RELEASE,
        "--webhook-first-retry",
        "0.2",
        "--webhook-allow-private",
    ])
    .await;
    let cloud = &rig.cloud;
    let client = client(cloud);
    let admin = session(cloud, &client, "acme", "ada@example.com", "admin").await;
    let member = session(cloud, &client, "acme", "max@example.com", "member").await;
    let receiver = Receiver::start(1).await;
    let secret = set_webhook(cloud, &client, &admin, &receiver.url).await;

    let received = receiver.wait_delivered("bridge.outdated").await;
    assert!(
        received.len() >= 2,
        "one failure, then a retry: {received:?}"
    );
    assert_eq!(received[0].answered, 500);
    let mut ids = Vec::new();
    for r in &received {
        assert!(
            signature_valid(&secret, &r.signature, &r.body),
            "bad signature {:?} on {}",
            r.signature,
            r.body
        );
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["type"], "bridge.outdated");
        assert_eq!(body["org"], "acme");
        assert_eq!(body["bridge"], "dc1");
        assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(body["release"], RELEASE);
        assert_eq!(body["instances"].as_array().unwrap().len(), 1);
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "a retry carries the same notification id");
    assert!(
        !signature_valid("whsec_wrong", &received[0].signature, &received[0].body),
        "the signature depends on the secret"
    );

    // The page lists the delivery (once the cloud has read the receiver's answer, a moment
    // after the receiver saw the request); a member sees the notice once subscribed, not before.
    let notifications = format!("{}/integrations/notifications", cloud.https);
    testkit::wait_until_async("the delivery listed as delivered", || async {
        let (_, page) = get(&client, notifications.clone(), &member).await;
        page.contains("bridge.outdated") && page.contains("delivered")
    })
    .await;
    let (_, page) = get(&client, notifications.clone(), &member).await;
    let notice = format!("Bridge release {RELEASE} is available");
    assert!(!page.contains(&notice));
    let (status, _) = post(
        &client,
        cloud,
        &member,
        "/integrations/notifications/me",
        &[("on", "1")],
    )
    .await;
    assert_eq!(status, 303);
    let (_, home) = get(&client, format!("{}/", cloud.https), &member).await;
    assert!(home.contains(&notice) && home.contains("dc1"), "{home}");
    let (_, bridges) = get(
        &client,
        format!("{}/integrations/bridge", cloud.https),
        &member,
    )
    .await;
    assert!(bridges.contains("outdated"), "{bridges}");
    let (_, admin_home) = get(&client, format!("{}/", cloud.https), &admin).await;
    assert!(!admin_home.contains(&notice), "not subscribed");
    // Members cannot change the webhook.
    let (status, _) = post(
        &client,
        cloud,
        &member,
        "/integrations/notifications/webhook",
        &[("url", "https://elsewhere.example.com/")],
    )
    .await;
    assert_eq!(status, 403);
}

// Multi-threaded: the client's idle connection to the cloud must answer the server's
// graceful close while these tests block on the process's exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_restarted_with_a_newer_release_announces_it_sqlite() {
    a_newer_release_is_announced(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_restarted_with_a_newer_release_announces_it_postgres() {
    a_newer_release_is_announced(Backend::Postgres).await;
}

async fn a_newer_release_is_announced(backend: Backend) {
    // The test's receiver listens on loopback.
    let mut cloud = Cloud::start_with(backend, &["--webhook-allow-private"]);
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let receiver = Receiver::start(0).await;
    let secret = set_webhook(&cloud, &client, &admin, &receiver.url).await;

    cloud.signal("TERM");
    assert_eq!(cloud.wait(), Some(0));
    cloud.extra_args = vec![
        "--webhook-allow-private".into(),
        "--bridge-release".into(),
        RELEASE.into(),
    ];
    cloud.launch();
    let received = receiver.wait_delivered("bridge.release").await;
    let r = received.last().unwrap();
    assert!(signature_valid(&secret, &r.signature, &r.body));
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["release"], RELEASE);
    assert_eq!(body["previous"], env!("CARGO_PKG_VERSION"));
    assert_eq!(received.len(), 1, "announced once: {received:?}");
}
