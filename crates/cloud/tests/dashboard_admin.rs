//! The dashboard's admin-facing pages through the real binary: the org's audit (who created,
//! revoked or changed what, from where; admins only; also JSON lines in the log), the services
//! view (the last deployment per service and environment), the timeline's day filters, and
//! `serve --public-url` in the commands the pages show.

use serde_json::{Value, json};
use testkit::dashboard::{client, get, post, post_to, session, shown_secret};
use testkit::{Backend, Cloud};

fn deployment(service: &str, environment: &str, version: &str, at: &str) -> Value {
    json!({"type": "deployment", "service": service, "environment": environment,
           "version": version, "status": "success", "timestamp": at})
}

#[tokio::test]
async fn the_audit_shows_who_changed_what_from_where_to_admins_only_sqlite() {
    audit(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_audit_shows_who_changed_what_from_where_to_admins_only_postgres() {
    audit(Backend::Postgres).await;
}

async fn audit(backend: Backend) {
    let cloud = Cloud::start(backend);
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let member = session(&cloud, &client, "acme", "max@example.com", "member").await;

    let (status, created) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/create",
        &[("kind", "api-key"), ("name", "deploys")],
    )
    .await;
    assert_eq!(status, 200);
    let api_key = shown_secret(&created);
    // A name `list` could not show as one line is refused, as the command refuses it.
    let long = "n".repeat(201);
    for (name, said) in [
        ("ab\u{202e}cd", "text-direction mark"),
        ("a\u{1}b", "control character"),
        (long.as_str(), "at most 200"),
    ] {
        let (status, page) = post(
            &client,
            &cloud,
            &admin,
            "/integrations/signals/create",
            &[("kind", "signal-key"), ("name", name)],
        )
        .await;
        assert_eq!(status, 422, "{name:?}: {page}");
        assert!(page.contains(said), "{page}");
    }
    let public_id: String = api_key.split('_').take(2).collect::<Vec<_>>().join("_");
    let (status, location) = post_to(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/revoke",
        &[("kind", "api-key"), ("id", &public_id), ("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 303);
    // The page it leads to says what was revoked (the row's going alone is easy to miss).
    let (_, page) = get(&client, format!("{}{location}", cloud.https), &admin).await;
    assert!(
        page.contains(&format!("role=\"status\">Key {public_id} revoked")),
        "{location}: {page}"
    );
    let (_, page) = get(
        &client,
        format!("{}/integrations/signals", cloud.https),
        &admin,
    )
    .await;
    assert!(!page.contains("revoked:"), "said again: {page}");
    // Revoked already (the form sent again): no question, and the page points to the
    // dashboard's tables for the ids, not to a command; confirmed or not.
    for confirm in ["", "yes"] {
        let (status, page) = post(
            &client,
            &cloud,
            &admin,
            "/integrations/signals/revoke",
            &[
                ("kind", "api-key"),
                ("id", &public_id),
                ("confirm", confirm),
            ],
        )
        .await;
        assert_eq!(status, 404, "{page}");
        assert!(
            page.contains("the tables on Integrations: Signals list the ids"),
            "{page}"
        );
        assert!(
            !page.contains("`list`") && !page.contains("Revoke API key"),
            "{page}"
        );
    }
    let (status, _) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/notifications/webhook",
        &[("url", "https://hooks.example.com/signals/T0KEN-in-path")],
    )
    .await;
    assert_eq!(status, 200);
    let (status, location) = post_to(
        &client,
        &cloud,
        &admin,
        "/integrations/notifications/webhook/remove",
        &[("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 303);
    let (_, page) = get(&client, format!("{}{location}", cloud.https), &admin).await;
    assert!(page.contains("Webhook removed"), "{location}: {page}");

    let (status, audit) = get(&client, format!("{}/audit", cloud.https), &admin).await;
    assert_eq!(status, 200);
    for expected in [
        "org.create",
        "user.create (admin)",
        "ada@example.com",
        "127.0.0.1",
        "api_key.create",
        "api_key.revoke",
        &public_id,
        "webhook.set",
        "https://hooks.example.com/…",
        "cli:",
    ] {
        assert!(audit.contains(expected), "no {expected:?} in {audit}");
    }
    assert!(!audit.contains(&api_key), "a secret in the audit");
    // A webhook's path often carries a token: the audit, which is logged too, keeps the origin.
    assert!(!audit.contains("T0KEN"), "a webhook's path in the audit");
    // The removal names the webhook that was removed.
    let removal = audit
        .find("webhook.remove")
        .expect("no webhook.remove in the audit");
    let row_end = removal + audit[removal..].find("</tr>").unwrap();
    assert!(
        audit[removal..row_end].contains("https://hooks.example.com/…"),
        "{}",
        &audit[removal..row_end]
    );
    // Newest first: the webhook before the key's creation.
    assert!(audit.find("webhook.set").unwrap() < audit.find("api_key.create").unwrap());
    // An edited "Older entries" link is said in the page's words.
    let (status, page) = get(&client, format!("{}/audit?before=abc", cloud.https), &admin).await;
    assert_eq!(status, 400);
    assert!(page.contains("this link was edited or cut"), "{page}");

    let (status, page) = get(&client, format!("{}/audit", cloud.https), &member).await;
    assert_eq!(status, 403, "{page}");
    // With the menu, so the member goes on from it (no Audit entry for a member).
    assert!(
        page.contains("Admins only") && page.contains("<nav aria-label=\"Main\">"),
        "{page}"
    );
    assert!(!page.contains("href=\"/audit\""), "{page}");

    // The same entries are JSON lines in the server's log, without the secret.
    let line = cloud.wait_log_line("api_key.revoke");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["message"], "audit");
    assert_eq!(v["actor"], "ada@example.com");
    assert_eq!(v["address"], "127.0.0.1");
    assert_eq!(v["object"], public_id.as_str());
    assert!(!cloud.log_text().contains(&api_key));
    cloud.wait_log_line("webhook.remove");
    assert!(
        !cloud.log_text().contains("T0KEN"),
        "a webhook's path in the log"
    );
}

/// A form refused for its input comes back as its own page with the error above it and what
/// was typed still in its fields (except a URL that may hold a password); nothing is made.
#[tokio::test]
async fn a_refused_form_keeps_what_was_typed() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let refused = |action: &'static str, fields: Vec<(&'static str, &'static str)>| {
        let (client, cloud, admin) = (&client, &cloud, &admin);
        async move {
            let (status, page) = post(client, cloud, admin, action, &fields).await;
            assert_eq!(status, 422, "{action}: {page}");
            // Said in the page's title too, which a screen reader reads first.
            assert!(
                page.contains("role=\"alert\"") && page.contains("<title>Error: "),
                "{action}: {page}"
            );
            page
        }
    };

    let page = refused(
        "/integrations/repositories",
        vec![
            ("repository", "acme/api"),
            ("bridge", "Dc 1"),
            ("source", "code"),
            ("path", "acme/api.git"),
        ],
    )
    .await;
    assert!(page.contains("bridge: expected"), "{page}");
    for typed in ["acme/api", "Dc 1", "code", "acme/api.git"] {
        assert!(
            page.contains(&format!("value=\"{typed}\"")),
            "{typed}: {page}"
        );
    }
    assert!(page.contains("No repository is mapped yet."), "{page}");
    // The field named is marked and takes the focus, the others not.
    assert!(
        page.contains(
            "value=\"Dc 1\" aria-invalid=\"true\" aria-describedby=\"mapping-error\" autofocus"
        ) && !page.contains("value=\"code\" aria-invalid"),
        "{page}"
    );
    assert_eq!(page.matches(" autofocus").count(), 1, "{page}");

    let page = refused("/integrations/bridge/create", vec![("name", "DC 1")]).await;
    assert!(page.contains("Bridge not created: bridge name"), "{page}");
    assert!(page.contains("value=\"DC 1\""), "{page}");
    assert!(page.contains("data-src=\"/integrations/bridge\""), "{page}");
    // The rule is on the page before anything is sent, for the browser's own refusal too.
    assert!(page.contains("id=\"bridge-name-hint\""), "{page}");

    // A form's own address asked for with GET (a bookmark, a reload) leads to its page.
    for (action, list) in [
        ("/integrations/bridge/create", "/integrations/bridge"),
        ("/integrations/bridge/revoke", "/integrations/bridge"),
        ("/integrations/signals/create", "/integrations/signals"),
        (
            "/integrations/notifications/webhook",
            "/integrations/notifications",
        ),
        (
            "/integrations/repositories/remove",
            "/integrations/repositories",
        ),
        ("/sign-out", "/"),
    ] {
        let res = client
            .get(format!("{}{action}", cloud.https))
            .header("cookie", &admin)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303, "{action}");
        assert_eq!(res.headers()["location"], list, "{action}");
    }
    // A type typed in another case is the one the filter shows.
    let (_, events) = get(
        &client,
        format!("{}/events?type=Deployment", cloud.https),
        &admin,
    )
    .await;
    assert!(
        events.contains("<option value=\"deployment\" selected>"),
        "{events}"
    );

    let page = refused(
        "/integrations/signals/create",
        vec![("kind", "api-key"), ("name", "a\u{1}b")],
    )
    .await;
    assert!(page.contains("control character"), "{page}");
    assert!(page.contains("value=\"a\u{1}b\""), "{page}");
    assert!(page.contains("id=\"api-name-error\""), "{page}");
    assert!(!page.contains("id=\"signal-name-error\""), "{page}");

    let page = refused(
        "/integrations/notifications/webhook",
        vec![("url", "ftp://hooks.example.com/x")],
    )
    .await;
    assert!(page.contains("Webhook URL not valid"), "{page}");
    assert!(
        page.contains("value=\"ftp://hooks.example.com/x\""),
        "{page}"
    );
    let page = refused(
        "/integrations/notifications/webhook",
        vec![("url", "https://u:s3cret@hooks.example.com/x")],
    )
    .await;
    assert!(!page.contains("s3cret"), "{page}");

    // Nothing was made by the refused forms.
    let (_, bridges) = get(
        &client,
        format!("{}/integrations/bridge", cloud.https),
        &admin,
    )
    .await;
    assert!(bridges.contains("No bridge yet."), "{bridges}");
    let (_, keys) = get(
        &client,
        format!("{}/integrations/signals", cloud.https),
        &admin,
    )
    .await;
    assert_eq!(keys.matches("None yet.").count(), 2, "{keys}");
}

#[tokio::test]
async fn services_show_each_last_deployment_and_the_timeline_filters_by_day_sqlite() {
    services_and_days(Backend::Sqlite).await;
}

#[tokio::test]
async fn services_show_each_last_deployment_and_the_timeline_filters_by_day_postgres() {
    services_and_days(Backend::Postgres).await;
}

async fn services_and_days(backend: Backend) {
    let cloud = Cloud::start(backend);
    let acme = cloud.tenant("acme");
    let client = client(&cloud);
    let member = session(&cloud, &client, "acme", "max@example.com", "member").await;
    cloud
        .post_event(
            &acme,
            &deployment("api", "production", "v1.0.0", "2026-01-10T09:00:00Z"),
        )
        .await;
    cloud
        .post_event(
            &acme,
            &deployment("api", "production", "v1.1.0", "2026-02-10T09:00:00Z"),
        )
        .await;
    cloud
        .post_event(
            &acme,
            &deployment("api", "staging", "v1.2.0-rc1", "2026-02-11T09:00:00Z"),
        )
        .await;
    cloud
        .post_event(
            &acme,
            &deployment("web", "production", "v7", "2026-01-05T09:00:00Z"),
        )
        .await;
    cloud.post_event(&acme, &json!({"type": "alert", "service": "api", "environment": "production", "status": "firing", "severity": "critical",
               "title": "Error rate", "timestamp": "2026-02-12T09:00:00Z"}),
    )
    .await;

    let (status, services) = get(&client, format!("{}/services", cloud.https), &member).await;
    assert_eq!(status, 200);
    for shown in ["v1.1.0", "v1.2.0-rc1", "v7", "staging"] {
        assert!(services.contains(shown), "no {shown} in {services}");
    }
    assert!(
        !services.contains("v1.0.0"),
        "an older deployment: {services}"
    );
    assert!(!services.contains("Error rate"), "not a deployment");

    let (status, february) = get(
        &client,
        format!("{}/events?from=2026-02-01&to=2026-02-11", cloud.https),
        &member,
    )
    .await;
    assert_eq!(status, 200);
    assert!(february.contains("v1.1.0") && february.contains("v1.2.0-rc1"));
    assert!(!february.contains("v1.0.0") && !february.contains("Error rate"));
    let (_, one_day) = get(
        &client,
        format!("{}/events?from=2026-02-12&to=2026-02-12", cloud.https),
        &member,
    )
    .await;
    assert!(one_day.contains("Error rate") && !one_day.contains("v1.1.0"));
    for odd in [
        "from=12/02/2026",
        "from=2024-1-1",
        "to=%2B2024-01-01",
        "from=-0001-01-01",
    ] {
        let (status, bad) = get(&client, format!("{}/events?{odd}", cloud.https), &member).await;
        assert_eq!(status, 400, "{odd}");
        let field = odd.split('=').next().unwrap();
        assert!(bad.contains(field) && bad.contains("YYYY-MM-DD"), "{bad}");
    }
    let (status, bad) = get(
        &client,
        format!("{}/events?from=2026-02-12&to=2026-02-11", cloud.https),
        &member,
    )
    .await;
    assert_eq!(status, 400, "an empty window is said, as the API says it");
    assert!(bad.contains("is after to"), "{bad}");
    let (status, bad) = get(
        &client,
        format!("{}/events?type=nosuch", cloud.https),
        &member,
    )
    .await;
    assert_eq!(status, 400);
    assert!(bad.contains("is not an event type"), "{bad}");
    // An edited link is a page that says so, as every other dashboard error.
    for path in ["/events/%FF"] {
        let (status, bad) = get(&client, format!("{}{path}", cloud.https), &member).await;
        assert_eq!(status, 400, "{path}");
        assert!(
            bad.contains("<html") && bad.contains("could not be read"),
            "{path}: {bad}"
        );
    }
    for path in [
        "/events?before_at=1795954224133000&before_id=zz",
        "/events?before_at=1795954224133000",
        "/events?before_at=garbage&before_id=01a2184f-ad98-7000-8000-000000000001",
    ] {
        let (status, bad) = get(&client, format!("{}{path}", cloud.https), &member).await;
        assert_eq!(status, 400, "{path}");
        assert!(bad.contains("this link was edited or cut"), "{path}: {bad}");
        assert!(!bad.contains("invalid digit"), "{path}: {bad}");
    }
    // A byte that is no UTF-8 is refused before any page reads it, by its parameter's name.
    let path = "/events?before_at=1795954224133000&before_id=%FF";
    let (status, bad) = get(&client, format!("{}{path}", cloud.https), &member).await;
    assert_eq!(status, 400, "{path}");
    assert!(bad.contains("before_id") && bad.contains("UTF-8"), "{bad}");
    // An address no route has: a page for a browser, problem+json for the API's clients.
    let page = client
        .get(format!("{}/nope", cloud.https))
        .header("cookie", &member)
        .header("accept", "text/html,application/xhtml+xml")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 404);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.text().await.unwrap().contains("no page at /nope"));
    let api = client
        .get(format!("{}/nope", cloud.https))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    assert_eq!(api.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn public_url_is_the_base_of_the_commands_pages_show() {
    let cloud = Cloud::start_with(
        Backend::Sqlite,
        &["--public-url", "https://signals.example.com/"],
    );
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let (_, page) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/create",
        &[("kind", "signal-key")],
    )
    .await;
    assert!(
        page.contains("https://signals.example.com/v1/signals/sigkey_"),
        "{page}"
    );
    // A front serves that address with its own certificate: no --cacert of the cloud's CA.
    assert!(!page.contains("--cacert"), "{page}");
    let refused = std::process::Command::new(testkit::cloud_bin())
        .args(["serve", "--public-url", "signals.example.com"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("--public-url") && why.contains("https://"),
        "{why}"
    );
    // Paths are appended to it: a query or fragment would swallow them (a set-password
    // token in a fragment never reaches the server); a link's --listen is an address too.
    let user_create = [
        "user",
        "create",
        "--org",
        "acme",
        "--email",
        "a@example.com",
        "--role",
        "member",
    ];
    let mut refusals = vec![(
        [&user_create[..], &["--listen", "nonsense"]].concat(),
        "not an address and port",
    )];
    for base in [
        "https://signals.example.com/?q=1",
        "https://signals.example.com/#f",
    ] {
        refusals.push((vec!["serve", "--public-url", base], "no query, fragment"));
        refusals.push((
            [&user_create[..], &["--public-url", base]].concat(),
            "no query, fragment",
        ));
    }
    for (args, why) in refusals {
        let refused = std::process::Command::new(testkit::cloud_bin())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains(why), "{args:?}: {said}");
    }
}

/// Bridges speak TLS only: a bridge token made on the plain listener's page gets commands and a
/// `bridge.yml` that dial the TLS listener, not the plain port with `https://` in front.
#[tokio::test]
async fn bridge_commands_dial_the_tls_listener_whichever_listener_served_the_page() {
    use testkit::dashboard::hidden;
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let (_, home) = get(&client, format!("{}/", cloud.http), &admin).await;
    let csrf = hidden(&home, "csrf");
    let page = client
        .post(format!("{}/integrations/bridge/create", cloud.http))
        .header("cookie", &admin)
        .form(&[("csrf", csrf.as_str()), ("name", "dc1")])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("sigbrt_"), "{page}");
    // The page's host (the plain listener's 127.0.0.1) with the TLS listener's port.
    let tls_port = cloud.https.rsplit(':').next().unwrap();
    let tls = format!("https://127.0.0.1:{tls_port}");
    assert!(page.contains(&format!("SERVICE_API_URL={tls}")), "{page}");
    assert!(page.contains(&format!("api_url: {tls}")), "{page}");
    let plain_port = cloud.http.rsplit(':').next().unwrap();
    assert!(
        !page.contains(&format!("https://127.0.0.1:{plain_port}")),
        "the plain port with https: {page}"
    );
    // A container reaches a cloud on the host's loopback only on the host's network, and the
    // image is the one `scripts/release` builds.
    assert!(
        page.contains("--network host localhost/signals-bridge:"),
        "{page}"
    );
    // On the host's network the health port is the host's: loopback only.
    assert!(page.contains("health_check_address: 127.0.0.1 "), "{page}");
}

/// The command a new API key's page shows, copied into a shell as it stands (HTTP/2, as
/// browsers reach the TLS listener: the address comes from the request's authority, and the
/// cloud's own CA file is named), sends an event to the org's newest signal key, which it
/// names; nothing needs setting first.
#[tokio::test]
async fn the_command_shown_with_a_new_api_key_works_as_copied() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.admin(&["org", "create", "acme"]);
    cloud.admin(&["signal-key", "create", "--org", "acme"]);
    let signal_key = cloud.admin(&["signal-key", "create", "--org", "acme"]);
    let client = client(&cloud);
    let admin = session(&cloud, &client, "acme", "ada@example.com", "admin").await;
    let (status, page) = post(
        &client,
        &cloud,
        &admin,
        "/integrations/signals/create",
        &[("kind", "api-key")],
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let api_key = shown_secret(&page);
    let block = page.split("<code id=\"curl\">").nth(1).unwrap();
    let command = block.split("</code>").next().unwrap();
    let command = command
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">");
    assert!(
        command.contains(&format!("{}/v1/signals/{}", cloud.https, signal_key.trim())),
        "{command}"
    );
    assert!(
        page.contains(&format!(
            "this org&#39;s newest signal key, {}",
            signal_key.trim()
        )) || page.contains(&format!(
            "this org&#x27;s newest signal key, {}",
            signal_key.trim()
        )),
        "{page}"
    );
    // The certificate is the cloud's own CA's: the command names the CA file to trust.
    assert!(
        command.contains(&format!("--cacert '{}'", cloud.ca_path().display())),
        "{command}"
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{command} -w ' %{{http_code}}'"))
        .env_remove("SIGNAL_KEY")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.ends_with(" 202"), "{command}\n{said}");
    assert!(!api_key.is_empty() && command.contains(&api_key));
}
