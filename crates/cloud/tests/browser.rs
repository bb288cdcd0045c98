//! The dashboard in a real browser (headless Chromium through WebDriver), end to end with the
//! real binaries: an admin sets a password and signs in, creates a bridge token, a real
//! `bridge` started with it appears connected without a reload, the admin revokes it and sees
//! it drop, creates keys, a deployment posted with them shows up in the timeline without a
//! reload, and a member cannot create keys. Every page passes axe-core (no serious or critical
//! violation) and is saved as screenshots under `target/screenshots/`.

use std::time::Duration;

use testkit::bridge::{BridgeProc, yaml_for};
use testkit::browser::Browser;
use testkit::dashboard::PASSWORD;
use testkit::{Backend, Cloud, seed_event};

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
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let browser = Browser::start().await;

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
    browser.check_page("bridges").await;

    // Revoked on the page: the tunnel drops, and the page shows it.
    browser
        .click("form[action='/integrations/bridge/revoke'] button")
        .await;
    browser.wait_for_text("No bridge yet.").await;
    bridge
        .wait_status("unauthorized", Duration::from_secs(20))
        .await;

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
    browser
        .goto(&format!("{}/integrations/signals", cloud.http))
        .await;
    browser.check_page("signals").await;

    browser.goto(&format!("{}/events", cloud.http)).await;
    browser.wait_for_text("No events match.").await;
    let mut event = seed_event();
    event["service"] = "checkout-browser".into();
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
    browser.check_page("events").await;
    browser.click("#live tbody a").await;
    browser.wait_for_text("deployment event").await;
    browser.check_page("event").await;

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
}
