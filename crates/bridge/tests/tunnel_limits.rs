//! How many tunnels one token may hold open: at most 16 live instances of one bridge, so that
//! a token holder cannot take every file descriptor of the cloud, which all tenants share.

use std::time::Duration;

use testkit::bridge::{BridgeProc, yaml_for};
use testkit::{Backend, Cloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bridge_holds_at_most_sixteen_tunnels() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let yaml = yaml_for(&cloud, "dc1", "");
    let env = [("SERVICE_BRIDGE_TOKEN", token.as_str())];
    let mut instances = Vec::new();
    for _ in 0..16 {
        instances.push(BridgeProc::start(&yaml, &env));
    }
    for instance in &instances {
        instance
            .wait_status("connected", Duration::from_secs(30))
            .await;
    }
    let extra = BridgeProc::start(&yaml, &env);
    testkit::wait_until("the 17th instance is refused, saying why", || {
        extra.log_text().contains("already has 16 live instances")
    })
    .await;
    let health = extra
        .health()
        .await
        .map(|(_, h)| h["connection_status"].clone());
    assert_ne!(health, Some(serde_json::json!("connected")));
    let listed: serde_json::Value = cloud
        .client()
        .get(format!("{}/v1/bridges", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["bridges"][0]["instances"].as_array().map(Vec::len),
        Some(16),
        "{listed}"
    );
    // The operator sees the refusals in the cloud's log.
    let refused = cloud.wait_log_line("already has 16 live instances");
    assert!(refused.contains("bridge tunnel refused"), "{refused}");
}
