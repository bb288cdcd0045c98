//! How streams and the process end: an answer cut midway is audited as cut, SIGHUP drains as
//! SIGTERM does, and a SIGTERM stops a bridge at once while it is still waiting on a silent
//! cloud.

use std::time::{Duration, Instant};

use testkit::bridge::{BridgeProc, Rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_midway_is_audited_as_cut() {
    let rig = Rig::start("").await;
    let whole = rig.get("/download?bytes=100000").await;
    assert_eq!(whole.bytes().await.unwrap().len(), 100_000);
    let mut cut = rig.get("/stall").await;
    assert_eq!(cut.status(), 200);
    assert!(
        cut.chunk().await.unwrap().is_some(),
        "the first piece arrives"
    );
    drop(cut);
    testkit::wait_until("the cut answer's audit record", || {
        rig.bridge.log_json().iter().any(|l| {
            l["type"] == "audit" && l["path"].as_str().is_some_and(|p| p.ends_with("/stall"))
        })
    })
    .await;
    let records = rig.bridge.audit_records(2).await;
    let of = |path: &str| {
        records
            .iter()
            .find(|r| r["path"].as_str().unwrap_or("").contains(path))
            .unwrap_or_else(|| panic!("no record of {path}: {records:?}"))
    };
    assert_eq!(of("/download")["status"], 200);
    assert!(of("/download").get("ended").is_none(), "{records:?}");
    assert_eq!(of("/stall")["status"], 200);
    assert_eq!(of("/stall")["ended"], "cut", "{records:?}");
}

/// SIGHUP (a terminal closed on a bridge run in the foreground) stops it as SIGTERM does: the
/// answer in flight finishes and is audited, and the bridge exits 0, where the signal's default
/// action ended it at once (exit 129) and lost the last audit records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_drains_as_sigterm_does() {
    let mut rig = Rig::start("").await;
    let answer = rig.get("/download?bytes=100000").await;
    assert_eq!(answer.status(), 200);
    rig.bridge.signal("HUP");
    assert_eq!(answer.bytes().await.unwrap().len(), 100_000);
    testkit::wait_until("the answer's audit record", || {
        rig.bridge.log_json().iter().any(|l| {
            l["type"] == "audit" && l["path"].as_str().is_some_and(|p| p.contains("/download"))
        })
    })
    .await;
    assert_eq!(rig.bridge.wait(), Some(0), "{}", rig.bridge.log_text());
    assert!(rig.bridge.log_text().contains("bridge stopped"));
}

/// A bridge started under `nohup` keeps ignoring SIGHUP, as nohup promises: the SIGTERM after
/// it is the first signal the bridge sees (one drain, exit 0), not a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_under_nohup_ignores_sighup() {
    let rig = Rig::start("").await;
    let token = rig
        .cloud
        .admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let mut bridge = BridgeProc::start_under_nohup(
        &testkit::bridge::yaml_for(&rig.cloud, "dc1", ""),
        &[("SERVICE_BRIDGE_TOKEN", &token)],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    bridge.signal("HUP");
    bridge.signal("TERM");
    assert_eq!(bridge.wait(), Some(0), "{}", bridge.log_text());
    let log = bridge.log_text();
    assert_eq!(log.matches("shutdown requested").count(), 1, "{log}");
    assert!(!log.contains("second signal"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_bridge_waiting_on_a_silent_cloud_at_once() {
    // Accepts connections and never says a word: the bridge's TLS handshake waits (15 s).
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let forged = format!("sigbrt_{}_{}", "0".repeat(16), "0".repeat(64));
    let mut bridge = BridgeProc::start(
        &format!(
            "name: dc1\napi_url: https://localhost:{port}\nheartbeat_interval: 1\nreconnect_delay: 1\nhealth_check_port: 0\n"
        ),
        &[("SERVICE_BRIDGE_TOKEN", &forged)],
    );
    let (held, _) = silent.accept().await.unwrap();
    bridge
        .wait_status("connecting", Duration::from_secs(10))
        .await;
    let asked = Instant::now();
    bridge.signal("TERM");
    assert_eq!(bridge.wait(), Some(0), "{}", bridge.log_text());
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the bridge waited {:?} for the silent cloud before stopping",
        asked.elapsed()
    );
    drop(held);
}

/// A revoked API key ends the answers it is still receiving (a live event stream), within
/// seconds, as it ends its database sessions; another key's stream goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_the_answers_it_is_receiving() {
    let rig = Rig::start("").await;
    let key = rig
        .cloud
        .admin(&["api-key", "create", "--org", "acme", "--name", "leaked"]);
    let url = format!("{}/v1/bridges/dc1/apis/internal/ticks", rig.cloud.http);
    let open = |key: &str| rig.cloud.client().get(&url).bearer_auth(key).send();
    let mut leaked = open(&key).await.unwrap();
    let mut kept = open(&rig.tenant.api_key).await.unwrap();
    assert!(leaked.chunk().await.unwrap().is_some());
    let id = key.rsplit_once('_').unwrap().0.to_string();
    rig.cloud
        .admin(&["api-key", "revoke", "--org", "acme", &id]);
    let revoked = Instant::now();
    let ended = loop {
        match leaked.chunk().await {
            Ok(Some(_)) => {
                assert!(
                    revoked.elapsed() < Duration::from_secs(15),
                    "the revoked key's stream still flows"
                );
            }
            Ok(None) | Err(_) => break revoked.elapsed(),
        }
    };
    assert!(ended < Duration::from_secs(15), "{ended:?}");
    assert!(
        kept.chunk().await.unwrap().is_some(),
        "another key's stream goes on"
    );
}
