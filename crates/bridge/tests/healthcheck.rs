//! `bridge healthcheck`, the container health check, against a real bridge: exit 0 with the
//! health JSON while connected, 1 once the tunnel is down (503) or nothing listens, and 2 when
//! the configuration cannot name the port.

use std::process::{Command, Output};
use std::time::Duration;

use testkit::bridge::{Rig, bridge_bin};

/// Runs `bridge healthcheck --config FILE` on `yaml` without the token or the `${INTERNAL_PW}`
/// the file names in the environment: a health check needs no secrets.
fn healthcheck(rig: &Rig, yaml: &str) -> Output {
    let path = rig.bridge.dir.path().join("healthcheck.yaml");
    std::fs::write(&path, yaml).unwrap();
    assert!(yaml.contains("${INTERNAL_PW}"), "{yaml}");
    Command::new(bridge_bin())
        .args(["healthcheck", "--config"])
        .arg(&path)
        .env_remove("SERVICE_BRIDGE_TOKEN")
        .env_remove("INTERNAL_PW")
        .output()
        .unwrap()
}

/// The running bridge's own configuration, with its health port fixed to the one it chose.
fn config_of(rig: &Rig, port: u16) -> String {
    let yaml = std::fs::read_to_string(rig.bridge.dir.path().join("bridge.yaml")).unwrap();
    assert!(yaml.contains("health_check_port: 0\n"), "{yaml}");
    yaml.replace(
        "health_check_port: 0\n",
        &format!("health_check_port: {port}\n"),
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn healthy_then_unhealthy_then_gone() {
    let mut rig = Rig::start("").await;
    let port = rig.bridge.health_port();
    let yaml = config_of(&rig, port);

    let out = healthcheck(&rig, &yaml);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let health: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["connection_status"], "connected");

    // The cloud goes away: the bridge keeps running, but /health says 503.
    rig.cloud.signal("KILL");
    rig.cloud.wait();
    rig.bridge
        .wait_health("unhealthy", Duration::from_secs(20))
        .await;
    let out = healthcheck(&rig, &yaml);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("answered 503"),
        "{}",
        text(&out.stderr)
    );

    // The bridge itself is gone: nothing listens on the port.
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let out = healthcheck(&rig, &yaml);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    // The default health_check_address (every interface) is probed on loopback.
    assert!(
        stderr.contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{stderr}"
    );
}

#[test]
fn a_port_chosen_at_start_cannot_be_probed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, "name: b\nhealth_check_port: 0\n").unwrap();
    let out = Command::new(bridge_bin())
        .args(["healthcheck", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", "t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("set a fixed health_check_port"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_bad_health_field_or_unknown_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(
        &path,
        "name: b\nhealth_check_address: localhost\nhealth_chek_port: 9\n",
    )
    .unwrap();
    let out = Command::new(bridge_bin())
        .args(["healthcheck", "--config"])
        .arg(&path)
        .env_remove("SERVICE_BRIDGE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    // Both problems at once, each with its line.
    assert!(
        stderr.contains("bridge.yaml:2:23: health_check_address: expected an IP address")
            && stderr.contains("bridge.yaml:3:1: unknown field `health_chek_port`"),
        "{stderr}"
    );
}

/// The operator's port often listens on every interface: one client address holds at most 16
/// connections (more are closed at once), a client that connects and sends nothing is closed
/// after the head timeout (5 s) rather than held, and a probe from another address is
/// answered meanwhile.
#[tokio::test]
async fn silent_clients_do_not_hold_the_health_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rig = Rig::start("").await;
    let address: std::net::SocketAddr = format!("127.0.0.1:{}", rig.bridge.health_port())
        .parse()
        .unwrap();
    let from = |ip: [u8; 4]| {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((ip, 0).into()).unwrap();
        socket.connect(address)
    };
    let mut silent = Vec::new();
    for _ in 0..16 {
        silent.push(from([127, 0, 0, 2]).await.unwrap());
    }
    // The 17th from the same address is closed at once, not held for the head timeout.
    let mut over = from([127, 0, 0, 2]).await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(3), over.read(&mut buf))
        .await
        .expect("the 17th connection of one address closed at once");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    // A probe from elsewhere is answered while the 16 sit there.
    let mut probe = from([127, 0, 0, 1]).await.unwrap();
    probe
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), probe.read_to_end(&mut answer))
        .await
        .expect("the probe answered at once")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut first = silent.swap_remove(0);
    let closed = tokio::time::timeout(Duration::from_secs(30), first.read(&mut buf))
        .await
        .expect("a silent client closed within 30 s");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}
