//! The dashboard in a real browser (headless Chromium through WebDriver), end to end with the
//! real binaries: an admin sets a password and signs in, creates a bridge token, a real
//! `bridge` started with it appears connected without a reload, the admin revokes it and sees
//! it drop, creates keys, a deployment posted with them shows up in the timeline without a
//! reload, and a member cannot create keys. The cloud ships a newer bridge release than the
//! bridge runs: the page marks it outdated, the webhook the admin sets on the page receives a
//! signed notification, and the admin's notice shows. Every page passes axe-core (no serious
//! or critical violation) and is saved as screenshots under `target/screenshots/`; so does
//! every page in a browser on a dark system theme, which gets the dark colours.

use std::time::Duration;

use testkit::bridge::{BridgeProc, yaml_for};
use testkit::browser::Browser;
use testkit::dashboard::PASSWORD;
use testkit::webhook::{Receiver, signature_valid};
use testkit::{Backend, Cloud, seed_event};

/// The bridge release this test's cloud ships: newer than the bridge it runs.
const RELEASE: &str = "9.9.9";

/// `cloud user create` with links on the plain listener (the browser trusts no private CA).
fn link(cloud: &Cloud, email: &str, role: &str) -> String {
    cloud.admin(&[
        "user",
        "create",
        "--org",
        "acme",
        "--email",
        email,
        "--role",
        role,
        "--public-url",
        &cloud.http,
    ])
}

async fn set_password(browser: &Browser, link: &str, name: &str) {
    browser.goto(link).await;
    browser.check_page(name).await;
    browser.fill("#password", PASSWORD).await;
    browser.fill("#confirm", PASSWORD).await;
    browser.click("form button[type=submit]").await;
    browser.wait_for_text("Signed in as").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_and_a_member_use_the_dashboard() {
    let cloud = Cloud::start_with(
        Backend::Sqlite,
        &[
            "--bridge-release",
            RELEASE,
            "--webhook-first-retry",
            "0.2",
            "--webhook-allow-private",
        ],
    );
    cloud.admin(&["org", "create", "acme"]);
    let browser = Browser::start().await;
    let receiver = Receiver::start(0).await;

    // Sign-in page, then the set-password link signs the admin in.
    browser.goto(&format!("{}/sign-in", cloud.http)).await;
    browser.check_page("sign-in").await;
    set_password(
        &browser,
        &link(&cloud, "ada@example.com", "admin"),
        "set-password",
    )
    .await;
    browser.check_page("home").await;

    // A bridge token, copied from the page, starts a real bridge that appears by itself.
    browser
        .goto(&format!("{}/integrations/bridge", cloud.http))
        .await;
    browser.check_page("bridges-empty").await;
    browser.fill("#bridge-name", "dc1").await;
    browser.click("form.inline button").await;
    browser.wait_for_text("shown this once").await;
    let token = browser.text("#token").await;
    assert!(token.starts_with("sigbrt_"), "{token}");
    browser.click("button[data-copy=token]").await;
    browser.wait_for_text("Copied").await;
    browser.check_page("bridge-token").await;
    browser
        .goto(&format!("{}/integrations/bridge", cloud.http))
        .await;
    browser.wait_for_text("never seen").await;
    let bridge = BridgeProc::start(
        &yaml_for(&cloud, "dc1", ""),
        &[("SERVICE_BRIDGE_TOKEN", token.as_str())],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    browser.wait_for_text("status connected").await;
    browser.wait_for_text("outdated").await;
    browser.check_page("bridges").await;

    // The org's webhook, set on the page, receives a signed notification about the outdated
    // bridge; subscribed, the admin sees the notice on every page.
    browser
        .goto(&format!("{}/integrations/notifications", cloud.http))
        .await;
    browser.fill("#url", &receiver.url).await;
    browser
        .click("form[action='/integrations/notifications/webhook'] button")
        .await;
    browser.wait_for_text("shown this once").await;
    let secret = browser.text("#secret").await;
    browser.check_page("webhook-created").await;
    let delivered = receiver.wait_delivered("bridge.outdated").await;
    let hook = delivered.last().unwrap();
    assert!(
        signature_valid(&secret, &hook.signature, &hook.body),
        "{hook:?}"
    );
    assert!(hook.body.contains("\"bridge\":\"dc1\"") && hook.body.contains(RELEASE));
    browser
        .goto(&format!("{}/integrations/notifications", cloud.http))
        .await;
    browser.wait_for_text("delivered").await;
    browser
        .click("form[action='/integrations/notifications/me'] button")
        .await;
    browser
        .wait_for_text(&format!("Bridge release {RELEASE} is available"))
        .await;
    browser.check_page("notifications").await;
    browser
        .goto(&format!("{}/integrations/bridge", cloud.http))
        .await;

    // Revoked on the page, once its question is answered: the tunnel drops, and the page
    // shows it.
    browser
        .click("form[action='/integrations/bridge/revoke'] button")
        .await;
    browser.wait_for_text("Revoke bridge dc1?").await;
    browser.check_page("confirm").await;
    browser
        .click("form[action='/integrations/bridge/revoke'] button")
        .await;
    browser.wait_for_text("Bridge dc1 revoked").await;
    browser.check_page("revoked").await;
    bridge
        .wait_status("unauthorized", Duration::from_secs(20))
        .await;
    browser.wait_for_text("status unauthorized").await;

    // Keys, then a deployment posted with them appears in the open timeline.
    browser
        .goto(&format!("{}/integrations/signals", cloud.http))
        .await;
    browser.check_page("signals-empty").await;
    browser
        .click("form.inline input[value=signal-key] ~ button")
        .await;
    browser.wait_for_text("Signal key created").await;
    let signal_key = browser.text("pre.secret code").await;
    browser
        .goto(&format!("{}/integrations/signals", cloud.http))
        .await;
    browser
        .click("form.inline input[value=api-key] ~ button")
        .await;
    browser.wait_for_text("API key created").await;
    let api_key = browser.text("pre.secret code").await;
    browser.check_page("key-created").await;
    // A reload shows the list: it does not send the form again, which would make a second key
    // nobody copied.
    assert_eq!(
        browser.url().await,
        format!("{}/integrations/signals", cloud.http)
    );
    browser.reload().await;
    browser.wait_for_text("Create an API key").await;
    let keys = cloud.admin(&["api-key", "list", "--org", "acme", "--output", "json"]);
    let keys: Vec<serde_json::Value> = serde_json::from_str(&keys).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    browser
        .goto(&format!("{}/integrations/signals", cloud.http))
        .await;
    browser.check_page("signals").await;

    browser.goto(&format!("{}/events", cloud.http)).await;
    browser.wait_for_text("No events match.").await;
    let mut event = seed_event();
    event["service"] = "checkout-browser".into();
    // Recent, so that the service's page has figures this week.
    let now = chrono::Utc::now();
    event["timestamp"] = (now - chrono::Duration::minutes(12)).to_rfc3339().into();
    event["metadata"]["commitTimestamp"] = (now - chrono::Duration::hours(3)).to_rfc3339().into();
    let posted = cloud
        .client()
        .post(format!("{}/v1/signals/{signal_key}", cloud.http))
        .bearer_auth(&api_key)
        .json(&event)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 202);
    browser.wait_for_text("checkout-browser").await;
    // The live table refreshes under a keyboard user without taking their focus away.
    browser.focus("#live tbody a").await;
    let focused = browser.focused().await;
    assert!(focused.starts_with("A /events/"), "{focused}");
    let mut another = seed_event();
    another["service"] = "focus-keeper".into();
    let posted = cloud
        .client()
        .post(format!("{}/v1/signals/{signal_key}", cloud.http))
        .bearer_auth(&api_key)
        .json(&another)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 202);
    browser.wait_for_text("focus-keeper").await;
    assert_eq!(browser.focused().await, focused);
    browser.check_page("events").await;
    browser.click("#live tbody a").await;
    browser.wait_for_text("Deployment: ").await;
    browser.check_page("event").await;
    browser.goto(&format!("{}/services", cloud.http)).await;
    browser.wait_for_text("checkout-browser").await;
    browser.check_page("services").await;
    // An alert after the deployment: its page lists the deployment as the suspect, and the
    // service's page shows its DORA figures.
    let alert = cloud
        .client()
        .post(format!("{}/v1/signals/{signal_key}", cloud.http))
        .bearer_auth(&api_key)
        .json(
            &serde_json::json!({"type": "alert", "service": "checkout-browser",
            "environment": "production", "status": "triggered", "severity": "critical",
            "title": "Checkout errors", "timestamp": now.to_rfc3339()}),
        )
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    browser
        .goto(&format!("{}/events/{alert}", cloud.http))
        .await;
    browser
        .wait_for_text("deployed 12 min before the alert")
        .await;
    browser.check_page("alert").await;
    browser
        .goto(&format!(
            "{}/services/checkout-browser?environment=production",
            cloud.http
        ))
        .await;
    browser.wait_for_text("Deployment frequency").await;
    browser.check_page("service").await;
    // An admin maps a repository to a Git source on its page.
    browser
        .goto(&format!("{}/integrations/repositories", cloud.http))
        .await;
    browser.wait_for_text("No repository is mapped yet.").await;
    for (field, value) in [
        ("#repository", "acme/checkout"),
        ("#bridge", "dc1"),
        ("#source", "code"),
        ("#path", "acme/checkout.git"),
    ] {
        browser.fill(field, value).await;
    }
    browser
        .click("form[action='/integrations/repositories'] button")
        .await;
    browser.wait_for_text("acme/checkout.git").await;
    browser.check_page("repositories").await;
    browser.goto(&format!("{}/audit", cloud.http)).await;
    browser.wait_for_text("bridge_token.revoke").await;
    browser.check_page("audit").await;

    // A live page whose session ends (here its cookie goes) shows the sign-in page by itself,
    // rather than going stale.
    browser.goto(&format!("{}/events", cloud.http)).await;
    browser.wait_for_text("checkout-browser").await;
    browser.client.delete_all_cookies().await.unwrap();
    browser.wait_for_text("Sign in").await;
    assert!(
        browser.url().await.contains("/sign-in"),
        "{}",
        browser.url().await
    );
    // Signing in again leads back to the events.
    browser.fill("#email", "ada@example.com").await;
    browser.fill("#password", PASSWORD).await;
    browser.click("form button[type=submit]").await;
    browser.wait_for_text("checkout-browser").await;
    assert!(
        browser.url().await.ends_with("/events"),
        "{}",
        browser.url().await
    );

    // A member reads but cannot create keys: no form, and a forged POST is refused.
    browser.click("form.signout button[name=everywhere]").await;
    browser.wait_for_text("Sign in").await;
    set_password(
        &browser,
        &link(&cloud, "max@example.com", "member"),
        "set-password-member",
    )
    .await;
    browser
        .goto(&format!("{}/integrations/signals", cloud.http))
        .await;
    let page = browser.source().await;
    assert!(page.contains(&signal_key) && !page.contains("Create an API key"));
    let status = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             const csrf = document.querySelector('input[name=csrf]').value;
             fetch('/integrations/signals/create', {method: 'POST',
               headers: {'Content-Type': 'application/x-www-form-urlencoded'},
               body: 'csrf=' + encodeURIComponent(csrf) + '&kind=api-key'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    // A POST without the CSRF token is refused, whoever sends it.
    let status = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/integrations/notifications/me', {method: 'POST',
               headers: {'Content-Type': 'application/x-www-form-urlencoded'},
               body: 'on=1'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, 403);
    let (background, _) = browser.body_colours().await;
    assert!(background.iter().all(|c| *c > 200), "{background:?}");

    // A browser on a dark system theme gets the dark colours on every page, each passing the
    // same checks (contrast included).
    let dark = Browser::start_dark().await;
    dark.goto(&format!("{}/sign-in", cloud.http)).await;
    dark.check_page("sign-in-dark").await;
    dark.fill("#email", "ada@example.com").await;
    dark.fill("#password", PASSWORD).await;
    dark.click("form button[type=submit]").await;
    dark.wait_for_text("Signed in as").await;
    for (page, path) in [
        ("home", "/".to_string()),
        ("events", "/events".to_string()),
        ("alert", format!("/events/{alert}")),
        ("services", "/services".to_string()),
        (
            "service",
            "/services/checkout-browser?environment=production".to_string(),
        ),
        ("bridges", "/integrations/bridge".to_string()),
        ("signals", "/integrations/signals".to_string()),
        ("notifications", "/integrations/notifications".to_string()),
        ("repositories", "/integrations/repositories".to_string()),
        ("audit", "/audit".to_string()),
    ] {
        dark.goto(&format!("{}{path}", cloud.http)).await;
        dark.wait_for_text("Sign out everywhere").await;
        let (background, text) = dark.body_colours().await;
        assert!(
            background.iter().all(|c| *c < 60) && text.iter().all(|c| *c > 180),
            "{page}: background {background:?}, text {text:?}"
        );
        dark.check_page(&format!("{page}-dark")).await;
    }
}
