//! The dashboard's Integrations → Bridge page with real bridges: a connected bridge shows its
//! instance (version, resources); a token made on the page comes with a YAML skeleton that
//! the bridge accepts; revoking on the page closes the tunnel at once and the page shows it.

use std::process::Command;
use std::time::{Duration, Instant};

use testkit::bridge::{BridgeProc, Rig, bridge_bin, yaml_for};
use testkit::dashboard::{client, hidden, set_password, user};

async fn page(client: &reqwest::Client, url: String, session: &str) -> String {
    let (status, body) = testkit::dashboard::get(client, url, session).await;
    assert_eq!(status, 200);
    body
}

/// Reads the page until it shows `wanted` (up to 10 s: the cloud records a token's use a
/// moment after it answers), then asserts that it does not show `not`.
async fn page_until(client: &reqwest::Client, url: &str, session: &str, wanted: &str, not: &str) {
    let start = Instant::now();
    loop {
        let listed = page(client, url.to_string(), session).await;
        if listed.contains(wanted) {
            assert!(!listed.contains(not), "{listed}");
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {wanted:?}: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_bridge_page_shows_instances_makes_tokens_and_revokes() {
    let rig = Rig::start("").await;
    let cloud = &rig.cloud;
    let client = client(cloud);
    let (_, admin) = set_password(&client, &user(cloud, "acme", "ada@example.com", "admin")).await;
    let url = format!("{}/integrations/bridge", cloud.https);

    let listed = page(&client, url.clone(), &admin).await;
    assert!(
        listed.contains("<strong>dc1</strong>") && listed.contains("status connected"),
        "{listed}"
    );
    assert!(listed.contains(&format!("version {}", env!("CARGO_PKG_VERSION"))));
    assert!(
        listed.contains("api internal"),
        "the declared resources: {listed}"
    );
    assert!(!listed.contains("outdated"));

    // A new token, and a skeleton the bridge accepts as configuration (exit 2 would mean not).
    let csrf = hidden(&listed, "csrf");
    let res = client
        .post(format!("{}/integrations/bridge/create", cloud.https))
        .header("cookie", &admin)
        .form(&[("csrf", csrf.as_str()), ("name", "dc2")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let created = res.text().await.unwrap();
    assert!(created.contains("sigbrt_") && created.contains("podman run"));
    // The token goes to podman through its environment, never in its argv (`ps` shows that).
    assert!(
        created.contains(
            "podman run -d --name bridge-dc2 --read-only \\\n  -e SERVICE_BRIDGE_TOKEN \\\n"
        ),
        "{created}"
    );
    assert!(!created.contains("-e SERVICE_BRIDGE_TOKEN="), "{created}");
    assert!(!created.contains("already had"), "{created}");
    let marker = "<pre tabindex=\"0\"><code>";
    let yaml_start = created.rfind(marker).unwrap() + marker.len();
    let yaml = created[yaml_start..].split("</code>").next().unwrap();
    let yaml = yaml
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert!(
        yaml.contains("\ndatabases:\n  - type: postgresql"),
        "{yaml}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bridge.yaml"), &yaml).unwrap();
    let check = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(dir.path().join("bridge.yaml"))
        .env("SERVICE_BRIDGE_TOKEN", "sigbrt_x_y")
        .env("GIT_TOKEN", "t")
        .env("API_TOKEN", "t")
        .env("REGISTRY_PASSWORD", "p")
        .env("DB_PASSWORD", "p")
        .output()
        .unwrap();
    assert_ne!(
        check.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let listed = page(&client, url.clone(), &admin).await;
    assert!(listed.contains("<strong>dc2</strong>") && listed.contains("status never seen"));
    // A second token for dc2 says that the first still works, and how to retire it.
    let (_, again) = testkit::dashboard::post(
        &client,
        cloud,
        &admin,
        "/integrations/bridge/create",
        &[("name", "dc2")],
    )
    .await;
    assert!(
        again.contains("Bridge dc2 already had 1 live token (sigbrt_")
            && again.contains("which still works")
            && again.contains("cloud bridge-token revoke --org acme --name dc2 ID"),
        "{again}"
    );

    // The command with no file at all, pasted into a shell as the page shows it (`bridge
    // check` in place of `bridge run`): it trusts the cloud's own CA, and the token is good.
    let unescape = |s: &str| {
        s.replace("&#34;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    };
    let line = created
        .lines()
        .map(|l| unescape(l.split("</code>").next().unwrap_or(l)))
        .find(|l| l.starts_with("SERVICE_BRIDGE_TOKEN=") && l.contains("SERVICE_BRIDGE_NAME=dc2"))
        .expect("the command with no file at all");
    assert!(line.contains("SERVICE_TLS_CA_FILE="), "{line}");
    let command = line.replace(
        " bridge run",
        &format!(" '{}' check", bridge_bin().display()),
    );
    let check = Command::new("sh")
        .args(["-c", &command])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{command}\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(yaml.contains("\ntls_ca_file: '"), "{yaml}");
    // A token only checked: enrolled, not reconnecting (no tunnel was ever open). The cloud
    // records the token's use a moment after it answers.
    page_until(
        &client,
        &url,
        &admin,
        "status enrolled",
        "status reconnecting",
    )
    .await;
    // Once a tunnel was open with it, a bridge stopped since is reconnecting.
    let token = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("SERVICE_BRIDGE_TOKEN="))
        .unwrap()
        .trim_matches('\'');
    let mut dc2 = BridgeProc::start(
        &yaml_for(cloud, "dc2", ""),
        &[("SERVICE_BRIDGE_TOKEN", token)],
    );
    dc2.wait_status("connected", Duration::from_secs(20)).await;
    dc2.signal("TERM");
    dc2.wait();
    page_until(
        &client,
        &url,
        &admin,
        "status reconnecting",
        "status enrolled",
    )
    .await;

    // Revoke dc1 on the page: a question first, which revokes nothing yet.
    let revoke = |confirm: &'static str| {
        client
            .post(format!("{}/integrations/bridge/revoke", cloud.https))
            .header("cookie", &admin)
            .form(&[
                ("csrf", csrf.as_str()),
                ("name", "dc1"),
                ("confirm", confirm),
            ])
            .send()
    };
    let res = revoke("").await.unwrap();
    assert_eq!(res.status(), 200);
    let question = res.text().await.unwrap();
    assert!(
        question.contains("Revoke bridge dc1?")
            && question.contains("name=\"confirm\" value=\"yes\""),
        "{question}"
    );
    let (_, health) = rig.bridge.health().await.unwrap();
    assert_eq!(
        health["connection_status"], "connected",
        "asked, not revoked"
    );
    // Confirmed: its tunnel closes at once, and the page says so.
    let res = revoke("yes").await.unwrap();
    assert_eq!(res.status(), 303);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with("/integrations/bridge?done=bridge-revoked&name=dc1&check="),
        "{location}"
    );
    // Sent again (Back, then the form once more): nothing left to ask about.
    let res = revoke("").await.unwrap();
    assert_eq!(res.status(), 404);
    // At once: closed by the revocation itself, not by the relay's own check (every 2 s), which
    // would have said so in the cloud's log (read once the bridge has been refused since).
    testkit::wait_until_async("the revoked bridge's tunnel closed", || async {
        rig.bridge
            .health()
            .await
            .is_some_and(|(_, h)| h["connection_status"] != "connected")
    })
    .await;
    // Its retries are refused: the token is gone.
    rig.bridge
        .wait_status("unauthorized", Duration::from_secs(20))
        .await;
    assert!(
        !rig.cloud
            .log_text()
            .contains("bridge token revoked; closed its tunnel"),
        "{}",
        rig.cloud.log_text()
    );
    // Still running with a revoked token: the page says so, and offers nothing to revoke.
    let listed = page(&client, url, &admin).await;
    assert!(
        listed.contains("status unauthorized") && listed.contains("its token was revoked"),
        "{listed}"
    );
    assert_eq!(
        listed.matches("/integrations/bridge/revoke").count(),
        1,
        "dc2's only: {listed}"
    );
}

#[tokio::test]
async fn members_cannot_make_bridge_tokens() {
    let rig = Rig::start("").await;
    let cloud = &rig.cloud;
    let client = client(cloud);
    let (_, member) =
        set_password(&client, &user(cloud, "acme", "max@example.com", "member")).await;
    let listed = page(
        &client,
        format!("{}/integrations/bridge", cloud.https),
        &member,
    )
    .await;
    assert!(listed.contains("<strong>dc1</strong>") && !listed.contains("Create a token"));
    let res = client
        .post(format!("{}/integrations/bridge/create", cloud.https))
        .header("cookie", &member)
        .form(&[("csrf", hidden(&listed, "csrf").as_str()), ("name", "dc9")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    // Nor revoke one: refused before the question a revocation asks.
    let res = client
        .post(format!("{}/integrations/bridge/revoke", cloud.https))
        .header("cookie", &member)
        .form(&[("csrf", hidden(&listed, "csrf").as_str()), ("name", "dc1")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert!(!res.text().await.unwrap().contains("Revoke bridge dc1?"));
}
