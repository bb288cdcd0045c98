//! `cloud webhook set` and `remove`: a webhook set from a script is the one notifications go
//! to, signed with the secret the command printed, and refused input is named; set again (a
//! new secret), restarted or not, it hears of no alert twice.

use chrono::{Duration, Utc};
use serde_json::json;
use testkit::dashboard::{client, get, session};
use testkit::webhook::{Receiver, signature_valid};
use testkit::{Backend, Cloud};

#[tokio::test]
async fn a_webhook_set_by_the_cli_receives_signed_notifications() {
    let (cloud, t) = cloud_for_webhooks(Backend::Sqlite);
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
        err.contains("--url is not an absolute address") && !err.contains("S3CRET"),
        "{err}"
    );
    let err = refused(&[&set[..], &["http://exa mple.com/hook"]].concat());
    assert!(err.contains("--url's host is not valid"), "{err}");
    let err = refused(&[&set[..], &[""]].concat());
    assert!(err.contains("--url is required"), "{err}");
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
    let (browser, admin, page) = notifications_page(&cloud).await;
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

/// A cloud whose webhooks may reach loopback, retrying after 0.2 s, with org `acme`.
fn cloud_for_webhooks(backend: Backend) -> (Cloud, testkit::Tenant) {
    let cloud = Cloud::start_with(
        backend,
        &["--webhook-first-retry", "0.2", "--webhook-allow-private"],
    );
    let t = cloud.tenant("acme");
    (cloud, t)
}

/// `cloud webhook set` of `url` for `acme` (a new signing secret each time).
fn set_webhook(cloud: &Cloud, url: &str) {
    cloud.admin(&[
        "webhook",
        "set",
        "--org",
        "acme",
        "--url",
        url,
        "--webhook-allow-private",
    ]);
}

/// An admin's browser and session, and the Notifications page as the admin sees it.
async fn notifications_page(cloud: &Cloud) -> (reqwest::Client, String, String) {
    let browser = client(cloud);
    let admin = session(cloud, &browser, "acme", "ada@example.com", "admin").await;
    let (_, page) = get(
        &browser,
        format!("{}/integrations/notifications", cloud.https),
        &admin,
    )
    .await;
    (browser, admin, page)
}

/// Posts a deployment of `service` 10 minutes ago and an alert of it now (a strong suspect);
/// returns once the alert reached the receiver, with the alert's id.
async fn strong_suspect(
    cloud: &Cloud,
    t: &testkit::Tenant,
    receiver: &Receiver,
    service: &str,
) -> String {
    let alert = post_strong_suspect(cloud, t, service).await;
    receiver.wait_delivered(&alert).await;
    alert
}

/// [`strong_suspect`] without waiting for a delivery.
async fn post_strong_suspect(cloud: &Cloud, t: &testkit::Tenant, service: &str) -> String {
    let now = Utc::now();
    let at = |minutes: i64| (now + Duration::minutes(minutes)).to_rfc3339();
    cloud
        .post_event(
            t,
            &json!({"type": "deployment", "service": service, "environment": "production",
                "version": "v2", "status": "success", "timestamp": at(-10)}),
        )
        .await;
    cloud
        .post_event(
            t,
            &json!({"type": "alert", "service": service, "environment": "production",
                "status": "triggered", "severity": "critical", "title": "Error rate",
                "timestamp": at(0)}),
        )
        .await
}

/// Setting the webhook again (to rotate its secret) and restarting the cloud re-send nothing
/// the org's receiver already got: each alert arrives once. Two alerts delivered after each
/// step are the barrier: the round that would re-send the first alert queues it before it
/// queues them.
async fn a_webhook_set_again_hears_of_no_alert_twice(backend: Backend) {
    let (mut cloud, t) = cloud_for_webhooks(backend);
    let receiver = Receiver::start(0).await;
    set_webhook(&cloud, &receiver.url);
    let first = strong_suspect(&cloud, &t, &receiver, "api").await;
    let times = |id: &str| {
        receiver
            .received()
            .iter()
            .filter(|r| r.body.contains(id))
            .count()
    };
    set_webhook(&cloud, &receiver.url);
    let mut barrier = Vec::new();
    for service in ["web1", "web2"] {
        barrier.push(strong_suspect(&cloud, &t, &receiver, service).await);
    }
    assert_eq!(times(&first), 1, "{:?}", receiver.received());
    // The Notifications page names the current webhook: what went to the earlier one says so.
    let (_, _, page) = notifications_page(&cloud).await;
    assert_eq!(page.matches("(to an earlier webhook)").count(), 1, "{page}");
    cloud.kill_and_restart();
    for service in ["web3", "web4"] {
        strong_suspect(&cloud, &t, &receiver, service).await;
    }
    for id in [&first, &barrier[0], &barrier[1]] {
        assert_eq!(times(id), 1, "{id}: {:?}", receiver.received());
    }
}

/// What the org's earlier webhook never got (its receiver failed every attempt, and it was
/// replaced while the retries went on) goes to the new one.
async fn a_new_webhook_gets_what_the_replaced_one_never_got(backend: Backend) {
    let (cloud, t) = cloud_for_webhooks(backend);
    let failing = Receiver::start(usize::MAX).await;
    let working = Receiver::start(0).await;
    set_webhook(&cloud, &failing.url);
    let alert = post_strong_suspect(&cloud, &t, "api").await;
    testkit::wait_until("an attempt at the failing receiver", || {
        failing.received().iter().any(|r| r.body.contains(&alert))
    })
    .await;
    set_webhook(&cloud, &working.url);
    working.wait_delivered(&alert).await;
}

#[tokio::test]
async fn a_new_webhook_gets_what_the_replaced_one_never_got_sqlite() {
    a_new_webhook_gets_what_the_replaced_one_never_got(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_new_webhook_gets_what_the_replaced_one_never_got_postgres() {
    a_new_webhook_gets_what_the_replaced_one_never_got(Backend::Postgres).await;
}

#[tokio::test]
async fn a_webhook_set_again_hears_of_no_alert_twice_sqlite() {
    a_webhook_set_again_hears_of_no_alert_twice(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_webhook_set_again_hears_of_no_alert_twice_postgres() {
    a_webhook_set_again_hears_of_no_alert_twice(Backend::Postgres).await;
}

/// A receiver by hand that holds its first POST until `release` is notified, then answers 200
/// to every POST; returns its URL and every body it got.
async fn holding_receiver(
    release: std::sync::Arc<tokio::sync::Notify>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (log, first) = (
        bodies.clone(),
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (log, first, release) = (log.clone(), first.clone(), release.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (log, first, release) = (log.clone(), first.clone(), release.clone());
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            log.lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&body).into_owned());
                            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                                release.notified().await;
                            }
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Empty::<
                                bytes::Bytes,
                            >::new(
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (url, bodies)
}

/// Set again while an attempt to the webhook waits for the receiver's answer (a secret
/// rotated during a slow delivery): what that attempt carries is not queued again for the new
/// webhook, so the receiver hears of the alert once.
#[tokio::test]
async fn a_webhook_set_again_during_an_attempt_hears_of_the_alert_once() {
    let (cloud, t) = cloud_for_webhooks(Backend::Sqlite);
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let (url, bodies) = holding_receiver(release.clone()).await;
    let count = |needle: &str| {
        let bodies = bodies.lock().unwrap();
        bodies.iter().filter(|b| b.contains(needle)).count()
    };
    set_webhook(&cloud, &url);
    let alert = post_strong_suspect(&cloud, &t, "api").await;
    testkit::wait_until("the first attempt", || count(&alert) == 1).await;
    set_webhook(&cloud, &url);
    // Another org's notification, delivered, shows that the notifier looked at every webhook
    // again while the first attempt was held.
    let other = cloud.tenant("other");
    let receiver = Receiver::start(0).await;
    cloud.admin(&[
        "webhook",
        "set",
        "--org",
        "other",
        "--url",
        &receiver.url,
        "--webhook-allow-private",
    ]);
    strong_suspect(&cloud, &other, &receiver, "db").await;
    release.notify_one();
    // Acme's next alert reaches the new webhook: any copy of the first would be queued first.
    let next = post_strong_suspect(&cloud, &t, "web").await;
    testkit::wait_until("the next alert", || count(&next) == 1).await;
    assert_eq!(count(&alert), 1, "{:?}", bodies.lock().unwrap());
}

/// A receiver by hand that takes every connection, reads the request's head and never
/// answers; returns its URL and how many requests reached it.
async fn silent_receiver() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let arrived = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = arrived.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // Held open, unanswered, until the cloud gives up on it.
                let _ = tcp.read(&mut buf).await;
            });
        }
    });
    (url, arrived)
}

/// A receiver that never answers holds at most 8 attempts at once (docs/notifications.md,
/// "Delivery and retries"), and another org's notification goes out meanwhile.
#[tokio::test]
async fn a_receiver_that_never_answers_holds_8_attempts_and_delays_no_other_org() {
    let (cloud, t) = cloud_for_webhooks(Backend::Sqlite);
    let (url, arrived) = silent_receiver().await;
    let held = || arrived.load(std::sync::atomic::Ordering::SeqCst);
    set_webhook(&cloud, &url);
    for i in 0..12 {
        post_strong_suspect(&cloud, &t, &format!("svc{i}")).await;
    }
    testkit::wait_until("8 attempts held by the silent receiver", || held() >= 8).await;
    // Another org's notification is delivered while the 8 wait (each for up to 10 s), and
    // shows that the notifier went round again with 4 more of acme's due.
    let other = cloud.tenant("other");
    let receiver = Receiver::start(0).await;
    cloud.admin(&[
        "webhook",
        "set",
        "--org",
        "other",
        "--url",
        &receiver.url,
        "--webhook-allow-private",
    ]);
    strong_suspect(&cloud, &other, &receiver, "db").await;
    assert_eq!(held(), 8, "attempts to one webhook at once");
}
