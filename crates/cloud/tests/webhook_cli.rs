//! `cloud webhook set` and `remove`: a webhook set from a script is the one notifications go
//! to, signed with the secret the command printed, and refused input is named.

use chrono::{Duration, Utc};
use serde_json::json;
use testkit::dashboard::{client, get, session};
use testkit::webhook::{Receiver, signature_valid};
use testkit::{Backend, Cloud};

#[tokio::test]
async fn a_webhook_set_by_the_cli_receives_signed_notifications() {
    let cloud = Cloud::start_with(
        Backend::Sqlite,
        &["--webhook-first-retry", "0.2", "--webhook-allow-private"],
    );
    let t = cloud.tenant("acme");
    let receiver = Receiver::start(0).await;
    let refused = |args: &[&str]| {
        let out = cloud.admin_output(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let set = ["webhook", "set", "--org", "acme", "--url"];

    // A loopback address without the flag: refused, saying which flag.
    let err = refused(&[&set[..], &[receiver.url.as_str()]].concat());
    assert!(
        err.contains("--url: 127.0.0.1 is not a public address")
            && err.contains("give this command --webhook-allow-private as well"),
        "{err}"
    );
    // One without its scheme: refused, its token not repeated (stderr ends up in CI logs).
    let err = refused(&[&set[..], &["hooks.example.com/services/T0/B0/S3CRET"]].concat());
    assert!(
        err.contains("--url is not usable") && !err.contains("S3CRET"),
        "{err}"
    );
    // A password in the URL: refused and not repeated.
    let err = refused(&[&set[..], &["https://hook:s3cret@hooks.example.com/x"]].concat());
    assert!(
        err.contains("user name or password") && !err.contains("s3cret"),
        "{err}"
    );
    let err = refused(&[
        "webhook",
        "set",
        "--org",
        "nope",
        "--url",
        "https://hooks.example.com/x",
    ]);
    assert!(err.contains("no org \"nope\""), "{err}");

    let secret = cloud.admin(
        &[
            &set[..],
            &[receiver.url.as_str(), "--webhook-allow-private"],
        ]
        .concat(),
    );
    assert!(secret.starts_with("whsec_"), "{secret}");

    // A strong suspect reaches it, signed with the printed secret.
    let now = Utc::now();
    let at = |minutes: i64| (now + Duration::minutes(minutes)).to_rfc3339();
    cloud
        .post_event(
            &t,
            &json!({"type": "deployment", "service": "api", "environment": "production",
                "version": "v2", "status": "success", "timestamp": at(-10)}),
        )
        .await;
    cloud
        .post_event(
            &t,
            &json!({"type": "alert", "service": "api", "environment": "production",
                "status": "triggered", "severity": "critical", "title": "Error rate",
                "timestamp": at(0)}),
        )
        .await;
    let received = receiver.wait_delivered("alert.suspect").await;
    let hook = received
        .iter()
        .find(|r| r.body.contains("alert.suspect"))
        .unwrap();
    assert!(signature_valid(&secret, &hook.signature, &hook.body));

    // The dashboard shows it, and the audit says the CLI set it.
    let browser = client(&cloud);
    let admin = session(&cloud, &browser, "acme", "ada@example.com", "admin").await;
    let (_, page) = get(
        &browser,
        format!("{}/integrations/notifications", cloud.https),
        &admin,
    )
    .await;
    assert!(page.contains("http://127.0.0.1:"), "{page}");
    let removed = cloud.admin(&["webhook", "remove", "--org", "acme"]);
    assert!(removed.contains("http://127.0.0.1:"), "{removed}");
    let (_, audit) = get(&browser, format!("{}/audit", cloud.https), &admin).await;
    assert!(
        audit.contains("webhook.set") && audit.contains("webhook.remove") && audit.contains("cli:"),
        "{audit}"
    );
    let err = refused(&["webhook", "remove", "--org", "acme"]);
    assert!(err.contains("has no webhook"), "{err}");
}
