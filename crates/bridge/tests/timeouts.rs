//! A peer that completes the TLS handshake and then never answers (a half-dead load balancer,
//! a misrouted port) cannot stall the bridge: enrollment gives up after 30 s and the tunnel
//! upgrade after 15 s, and the bridge goes on trying.

use std::time::{Duration, Instant};

use testkit::bridge::BridgeProc;
use testkit::tls::TestCa;
use tokio::io::AsyncReadExt;

/// Accepts TLS on `127.0.0.1:0` with a certificate for `localhost`, reads whatever comes,
/// and never writes a byte back.
async fn silent_after_tls(ca: &TestCa) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config("localhost"));
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let mut sink = vec![0u8; 16 * 1024];
                    while matches!(tls.read(&mut sink).await, Ok(n) if n > 0) {}
                }
            });
        }
    });
    (port, task)
}

fn yaml(port: u16, ca_file: &std::path::Path, extra: &str) -> String {
    format!(
        "name: dc1\napi_url: https://localhost:{port}\ntls_ca_file: {}\nreconnect_delay: 1\nhealth_check_port: 0\n{extra}",
        ca_file.display()
    )
}

/// Waits until `within` after `started` for a log line containing `needle`; returns when it
/// came, counted from `started`.
async fn wait_for_log(
    bridge: &BridgeProc,
    needle: &str,
    started: Instant,
    within: Duration,
) -> Duration {
    loop {
        if bridge.log_text().contains(needle) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "no {needle:?} within {within:?}:\n{}",
            bridge.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrollment_and_the_tunnel_upgrade_time_out_against_a_silent_peer() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_pem(dir.path(), "ca.pem");
    let (port, _server) = silent_after_tls(&ca).await;

    let started = Instant::now();
    // Without a certificate the bridge enrolls first.
    let enrolling = BridgeProc::start(
        &yaml(port, &ca_file, ""),
        &[("SERVICE_BRIDGE_TOKEN", "sigbrt_0123456789abcdef_00")],
    );
    // With the operator's own certificate it goes straight to the upgrade.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["dc1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let upgrading = BridgeProc::start(
        &yaml(
            port,
            &ca_file,
            &format!(
                "tls_cert_file: {}\ntls_key_file: {}\n",
                cert_file.display(),
                key_file.display()
            ),
        ),
        &[("SERVICE_BRIDGE_TOKEN", "sigbrt_0123456789abcdef_00")],
    );

    let upgrade = wait_for_log(
        &upgrading,
        "did not answer the tunnel upgrade within 15s",
        started,
        Duration::from_secs(25),
    )
    .await;
    assert!(
        upgrade >= Duration::from_secs(14),
        "gave up after {upgrade:?}"
    );
    let enroll = wait_for_log(
        &enrolling,
        "enrollment: the cloud did not answer within 30s",
        started,
        Duration::from_secs(40),
    )
    .await;
    assert!(
        enroll >= Duration::from_secs(29),
        "gave up after {enroll:?}"
    );
    // Neither gave up for good: each plans its next attempt and says it is not connected.
    for bridge in [&enrolling, &upgrading] {
        wait_for_log(
            bridge,
            "next connection attempt",
            started,
            Duration::from_secs(45),
        )
        .await;
        let (code, health) = bridge.health().await.unwrap();
        assert_eq!(code, 503, "{health}");
        assert!(
            bridge
                .metric("service_bridge_connection_errors_total")
                .await
                >= 1.0
        );
    }
}
