//! Who may open a tunnel and who may use it: tokens, client certificates, TLS versions, orgs.

use std::sync::Arc;
use std::time::Duration;

use testkit::bridge::{BridgeProc, Rig, yaml_for};
use testkit::{Backend, Cloud};

// Bridge tokens, enrollment and the CA live in storage: these run on SQLite and PostgreSQL.
testkit::on_both_backends!(
    a_wrong_token_is_reported_as_unauthorized,
    revoking_the_token_closes_the_live_tunnel_within_seconds,
    undeclared_resources_and_other_orgs_are_refused,
    unsupported_versions_and_borrowed_certificates_are_refused,
    state_dir_keeps_the_certificate_across_restarts_and_drops_one_the_cloud_refuses,
);

async fn a_wrong_token_is_reported_as_unauthorized(backend: Backend) {
    let cloud = Cloud::start(backend);
    cloud.tenant("acme");
    cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let forged = format!("sigbrt_{}_{}", "0".repeat(16), "0".repeat(64));
    let bridge = BridgeProc::start(
        &yaml_for(&cloud, "dc1", ""),
        &[("SERVICE_BRIDGE_TOKEN", &forged)],
    );
    bridge
        .wait_status("unauthorized", Duration::from_secs(20))
        .await;
    assert!(
        bridge
            .metric("service_bridge_connection_errors_total")
            .await
            >= 1.0
    );
    // The log is read from the bridge's output by another thread: it may trail /health.
    testkit::wait_until("the bridge's log says the token was rejected", || {
        bridge.log_text().contains("rejected the bridge token")
    })
    .await;
    assert!(!bridge.log_text().contains(&forged), "the token was logged");
    assert_retries_slowly(&bridge).await;
}

/// After the cloud refused the token, the next attempt is 30–60 s away (not the 1 s of
/// `reconnect_delay`), so refused bridges do not hammer the cloud.
async fn assert_retries_slowly(bridge: &BridgeProc) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let delay_ms = loop {
        let delay = bridge
            .log_json()
            .into_iter()
            .skip_while(|l| {
                !l["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("rejected the bridge token")
            })
            .find(|l| l["message"] == "next connection attempt")
            .and_then(|l| l["delay_ms"].as_u64());
        if let Some(delay) = delay {
            break delay;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no next attempt logged after the refusal:\n{}",
            bridge.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        (30_000..=60_000).contains(&delay_ms),
        "a refused bridge retries in {delay_ms} ms"
    );
}

async fn revoking_the_token_closes_the_live_tunnel_within_seconds(backend: Backend) {
    let rig = Rig::start_on(backend, "").await;
    rig.cloud
        .admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"]);
    rig.bridge
        .wait_status("unauthorized", Duration::from_secs(10))
        .await;
    let res = rig.get("/x").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "30");
    let body: serde_json::Value = res.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("revoked"),
        "{body}"
    );
    assert_retries_slowly(&rig.bridge).await;
    // The cloud said why before it closed the tunnel: the bridge did not take it for a lost
    // tunnel and dial again (after up to a minute of back-off) to learn it.
    let log = rig.bridge.log_text();
    assert!(
        !log.contains("tunnel lost") && log.contains("the bridge token was revoked"),
        "{log}"
    );
}

/// A token rotation: the old token revoked by its id closes the tunnels that use it, and the
/// bridge's new token keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_one_token_by_id_leaves_the_bridges_other_token_working() {
    let rig = Rig::start_on(Backend::Sqlite, "").await;
    let new = rig
        .cloud
        .admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let listed = rig
        .cloud
        .admin(&["bridge-token", "list", "--org", "acme", "--output", "json"]);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
    let ids: Vec<&str> = listed.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{listed:?}");
    let old = *ids.iter().find(|id| !new.starts_with(**id)).unwrap();
    let revoke = |id: &str| {
        rig.cloud.admin_output(&[
            "bridge-token",
            "revoke",
            "--org",
            "acme",
            "--name",
            "dc1",
            id,
        ])
    };
    let out = revoke(old);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("revoked {old} (bridge dc1)")
    );
    // The running bridge used the old token: its tunnel is closed.
    rig.bridge
        .wait_status("unauthorized", Duration::from_secs(10))
        .await;
    // The new one still opens a tunnel.
    let cert = enroll(&rig.cloud, &new, "dc1").await;
    let res = connect_with(&rig.cloud, &cert, &new, "dc1", "1").await;
    assert_eq!(res.status(), 101);
    // The old id again: nothing left to revoke, and the message says where the ids are.
    let out = revoke(old);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bridge-token list"), "{stderr}");
    // A live token of another bridge, revoked under the wrong name: said whose it is.
    let other = rig
        .cloud
        .admin(&["bridge-token", "create", "--org", "acme", "--name", "dc2"]);
    let other_id = other.rsplit_once('_').unwrap().0.to_string();
    let out = revoke(&other_id);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{other_id} is a token of bridge \"dc2\", not \"dc1\": revoke it with --name dc2"
        )),
        "{stderr}"
    );
    // A token mangled in pasting (a space for its `_`) is refused and not repeated.
    let mangled = new.replacen('_', " ", 2);
    let out = revoke(&mangled);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let secret = new.rsplit('_').next().unwrap();
    assert!(!stderr.contains(secret), "{stderr}");
    assert!(stderr.contains("not a bridge token's id"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_a_client_certificate_opens_no_tunnel() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let res = cloud
        .client()
        .get(format!("{}/v1/bridge/connect", cloud.https))
        .bearer_auth(&token)
        .header("x-bridge-name", "dc1")
        .header("x-bridge-protocol", "1")
        .header("connection", "upgrade")
        .header("upgrade", tunnel::UPGRADE_PROTOCOL)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let body: serde_json::Value = res.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("client certificate"),
        "{body}"
    );
    // The operator sees it too: a warning with the peer address and the reason.
    let refused = cloud.wait_log_line("bridge tunnel refused");
    assert!(refused.contains("\"level\":\"WARN\""), "{refused}");
    assert!(refused.contains("127.0.0.1:"), "{refused}");
    assert!(
        refused.contains("client certificate is required"),
        "{refused}"
    );
    // Plain HTTP serves neither tunnels nor enrollment (the token would travel in clear).
    for path in ["/v1/bridge/connect", "/v1/bridge/enroll"] {
        let res = cloud
            .client()
            .get(format!("{}{path}", cloud.http))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_is_refused() {
    let cloud = Cloud::start(Backend::Sqlite);
    let ca = std::fs::read(cloud.ca_path()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let handshake = |version: &'static rustls::SupportedProtocolVersion| {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        let port = cloud.tls_port();
        async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
        }
    };
    // The same client with TLS 1.3 gets through, so the refusal below is the version's.
    handshake(&rustls::version::TLS13)
        .await
        .expect("a TLS 1.3 handshake");
    let Err(err) = handshake(&rustls::version::TLS12).await else {
        panic!("a TLS 1.2 handshake succeeded");
    };
    let refused = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::AlertReceived(rustls::AlertDescription::ProtocolVersion)
            )
        });
    assert!(refused, "TLS 1.2 failed, but not on its version: {err:?}");
}

use rustls_pki_types::pem::PemObject;

async fn undeclared_resources_and_other_orgs_are_refused(backend: Backend) {
    let rig = Rig::start_on(backend, "").await;
    let client = rig.cloud.client();
    let res = client
        .get(format!(
            "{}/v1/bridges/dc1/apis/secret-admin/x",
            rig.cloud.http
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "an undeclared resource is unreachable");
    let other = rig.cloud.tenant("globex");
    let res = client
        .get(rig.api_url("/x"))
        .bearer_auth(&other.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "another org's bridge is invisible");
    let res = client.get(rig.api_url("/x")).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(
        rig.upstream
            .stats
            .total
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// Enrolls like a bridge would: returns (certificate PEM, key PEM).
async fn enroll(cloud: &Cloud, token: &str, name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let res = cloud
        .client()
        .post(format!("{}/v1/bridge/enroll", cloud.https))
        .bearer_auth(token)
        .body(csr)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    (
        body["certificate"].as_str().unwrap().to_string(),
        key.serialize_pem(),
    )
}

async fn connect_with(
    cloud: &Cloud,
    cert: &(String, String),
    token: &str,
    name: &str,
    protocol: &str,
) -> reqwest::Response {
    let ca = std::fs::read(cloud.ca_path()).unwrap();
    let identity = reqwest::Identity::from_pem(format!("{}{}", cert.0, cert.1).as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .identity(identity)
        .http1_only()
        .build()
        .unwrap();
    client
        .get(format!("{}/v1/bridge/connect", cloud.https))
        .bearer_auth(token)
        .header("x-bridge-name", name)
        .header("x-bridge-protocol", protocol)
        .header("connection", "upgrade")
        .header("upgrade", tunnel::UPGRADE_PROTOCOL)
        .send()
        .await
        .unwrap()
}

async fn unsupported_versions_and_borrowed_certificates_are_refused(backend: Backend) {
    let cloud = Cloud::start(backend);
    cloud.tenant("acme");
    let dc1 = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let dc2 = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc2"]);
    let cert = enroll(&cloud, &dc1, "dc1").await;
    let res = connect_with(&cloud, &cert, &dc1, "dc1", "99").await;
    assert_eq!(res.status(), 426);
    let why = res.headers()["x-bridge-refusal"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(why.contains("upgrade the cloud"), "{why}");
    assert!(why.contains("accepts 1 to 2"), "{why}");
    let problem: serde_json::Value = res.json().await.unwrap();
    assert_eq!(
        problem["title"], "Tunnel protocol not supported",
        "{problem}"
    );
    assert_eq!(problem["status"], 426, "{problem}");
    cloud.wait_log_line("bridge protocol version 99 is not supported");
    let res = connect_with(&cloud, &cert, &dc1, "dc1", "0").await;
    assert_eq!(res.status(), 426);
    assert!(
        res.headers()["x-bridge-refusal"]
            .to_str()
            .unwrap()
            .contains("upgrade the bridge")
    );
    // The previous protocol version is still accepted, so bridges may be upgraded after the
    // cloud, one instance at a time.
    let res = connect_with(&cloud, &cert, &dc1, "dc1", "1").await;
    assert_eq!(res.status(), 101);
    // dc1's certificate does not open a tunnel for dc2, even with dc2's token.
    let res = connect_with(&cloud, &cert, &dc2, "dc2", "1").await;
    assert_eq!(res.status(), 403);
    // A certificate alone, without a valid token, opens nothing.
    let res = connect_with(
        &cloud,
        &cert,
        "sigbrt_0000000000000000_0000000000000000000000000000000000000000000000000000000000000000",
        "dc1",
        "1",
    )
    .await;
    assert_eq!(res.status(), 401);
    // The right pair is accepted (101).
    let res = connect_with(&cloud, &cert, &dc1, "dc1", "1").await;
    assert_eq!(res.status(), 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_processes_on_one_database_share_their_ca() {
    let first = Cloud::start(Backend::Postgres);
    let second = Cloud::start_beside(&first);
    let ca = std::fs::read_to_string(first.ca_path()).unwrap();
    assert_eq!(ca, std::fs::read_to_string(second.ca_path()).unwrap());
    // A bridge enrolled and connected through the second process trusts the first's ca.pem.
    first.tenant("acme");
    let token = first.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let yaml = yaml_for(&second, "dc1", "").replace(
        &second.ca_path().display().to_string(),
        &first.ca_path().display().to_string(),
    );
    let bridge = BridgeProc::start(&yaml, &[("SERVICE_BRIDGE_TOKEN", &token)]);
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
}

async fn state_dir_keeps_the_certificate_across_restarts_and_drops_one_the_cloud_refuses(
    backend: Backend,
) {
    let state = tempfile::tempdir().unwrap();
    let extra = format!("state_dir: {}\n", state.path().display());
    let connected_bridge = |cloud: &Cloud, token: &str| {
        let bridge = BridgeProc::start(
            &yaml_for(cloud, "dc1", &extra),
            &[("SERVICE_BRIDGE_TOKEN", token)],
        );
        async move {
            bridge
                .wait_status("connected", Duration::from_secs(20))
                .await;
            bridge
        }
    };
    let enrolled = |c: &Cloud| c.log_text().matches("bridge enrolled").count();
    let cloud = Cloud::start(backend);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);

    let mut first = connected_bridge(&cloud, &token).await;
    assert_eq!(enrolled(&cloud), 1);
    assert!(state.path().join(bridge::state::CERT_FILE).exists());
    first.signal("TERM");
    first.wait();

    // Restarted: connects with the saved certificate, no second enrollment.
    drop(connected_bridge(&cloud, &token).await);
    assert_eq!(enrolled(&cloud), 1, "{}", cloud.log_text());

    // Another cloud (another CA) refuses that certificate: the bridge drops it and enrolls.
    let other = Cloud::start(backend);
    other.tenant("acme");
    let other_token = other.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let third = connected_bridge(&other, &other_token).await;
    assert_eq!(enrolled(&other), 1);
    assert!(
        third
            .log_text()
            .contains("did not open a tunnel; enrolling again"),
        "{}",
        third.log_text()
    );
    // An expected repair: no error logged, no back-off waited, no connection error counted.
    assert!(
        !third.log_text().contains("cannot connect to the cloud"),
        "{}",
        third.log_text()
    );
    assert_eq!(
        third.metric("service_bridge_connection_errors_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_certificate_outlives_a_cloud_outage() {
    let state = tempfile::tempdir().unwrap();
    let extra = format!("state_dir: {}\n", state.path().display());
    let mut cloud = Cloud::start(Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let start = |cloud: &Cloud| {
        BridgeProc::start(
            &yaml_for(cloud, "dc1", &extra),
            &[("SERVICE_BRIDGE_TOKEN", &token)],
        )
    };
    let mut first = start(&cloud);
    first
        .wait_status("connected", Duration::from_secs(20))
        .await;
    first.signal("TERM");
    first.wait();

    // The bridge restarts while the cloud is down: its attempts fail, the certificate stays.
    cloud.signal("KILL");
    cloud.wait();
    let second = start(&cloud);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !second.log_text().contains("cannot connect to the cloud") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            second.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(state.path().join(bridge::state::CERT_FILE).exists());
    cloud.launch();
    second
        .wait_status("connected", Duration::from_secs(20))
        .await;
    assert_eq!(
        cloud.log_text().matches("bridge enrolled").count(),
        1,
        "the saved certificate was used, not a new enrollment"
    );
}

/// A CA of "the operator's own PKI" and a client certificate it signs for `cn`, as PEM files
/// in `dir`: (CA, certificate, key).
struct OperatorPki {
    dir: tempfile::TempDir,
    ca: std::path::PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl OperatorPki {
    fn new(ca_name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let ca = dir.path().join("ops-ca.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        let issuer = rcgen::Issuer::from_ca_cert_pem(&cert.pem(), key).unwrap();
        OperatorPki { dir, ca, issuer }
    }

    /// The `tls_cert_file`/`tls_key_file` lines of a client certificate named `cn`.
    fn client_yaml(&self, cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let file = cn.replace(':', "_");
        let (cert_path, key_path) = (
            self.dir.path().join(format!("{file}.pem")),
            self.dir.path().join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        format!(
            "tls_cert_file: {}\ntls_key_file: {}\n",
            cert_path.display(),
            key_path.display()
        )
    }
}

/// With `cloud serve --client-ca`, a bridge certificate from the operator's own CA, named
/// ORG:BRIDGE, opens the tunnel together with the bridge's token (no enrollment); the same CA's
/// certificate for another bridge does not, nor for another org. A trusted operator CA that
/// copies the internal CA's name cannot pass its certificates off as enrolled ones
/// (ORG_ID:BRIDGE): which CA signed is decided by signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_certificate_from_a_trusted_ca_opens_the_tunnel() {
    let pki = OperatorPki::new("Acme operations CA");
    let impostor = OperatorPki::new("signals local CA");
    let bundle = pki.dir.path().join("trusted.pem");
    let pem = |path: &std::path::Path| std::fs::read_to_string(path).unwrap();
    std::fs::write(&bundle, pem(&pki.ca) + &pem(&impostor.ca)).unwrap();
    let own = pki.client_yaml("acme:dc1");
    let rig = Rig::start_full(
        Backend::Sqlite,
        &["--client-ca", bundle.to_str().unwrap()],
        |upstream| format!("{own}{}", testkit::bridge::internal_api_yaml(upstream, "")),
    )
    .await;
    assert_eq!(rig.get("/x").await.status(), 200);
    assert!(
        !rig.cloud.log_text().contains("bridge enrolled"),
        "the bridge enrolled although it had its own certificate"
    );
    // bridge check tries the configured certificate as a tunnel would, and opens none.
    let token = [("SERVICE_BRIDGE_TOKEN", rig.token.as_str())];
    let (_, out) = testkit::bridge::check(&yaml_for(&rig.cloud, "dc1", &own), &token);
    assert!(
        out.contains("ok (TLS 1.3, token and tls_cert_file accepted, direct)"),
        "{out}"
    );
    assert!(!rig.cloud.log_text().contains("bridge enrolled"), "{out}");
    assert_eq!(
        rig.cloud.log_text().matches("bridge connected").count(),
        1,
        "check opened a tunnel"
    );
    let nobody = OperatorPki::new("Nobody's CA");
    let stranger = nobody.client_yaml("acme:dc1");
    for (cert, refusal) in [
        (
            pki.client_yaml("acme:other"),
            "another bridge than this token's",
        ),
        (stranger, "refused the bridge's client certificate"),
    ] {
        let (code, out) = testkit::bridge::check(&yaml_for(&rig.cloud, "dc1", &cert), &token);
        assert_eq!(code, Some(1), "{out}");
        assert!(out.contains(refusal), "{out}");
    }
    rig.cloud.tenant("globex");
    // acme is the first org: id 1, the internal CA's name for its bridge dc1 is "1:dc1".
    let wrong_certs = [
        pki.client_yaml("acme:other"),
        pki.client_yaml("globex:dc1"),
        impostor.client_yaml("1:dc1"),
    ];
    for (wrong, cert) in ["acme:other", "globex:dc1", "1:dc1 (impostor CA)"]
        .iter()
        .zip(&wrong_certs)
    {
        let yaml = yaml_for(&rig.cloud, "dc1", cert);
        let bridge = BridgeProc::start(&yaml, &[("SERVICE_BRIDGE_TOKEN", &rig.token)]);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !bridge
            .log_text()
            .contains("another bridge than this token's")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "a certificate named {wrong} was not refused:\n{}",
                bridge.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A saved certificate that cannot be read is said in the log (which file, and why) before the
/// bridge enrolls again: it was replaced without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_saved_certificate_is_said_before_enrolling_again() {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join(bridge::state::CERT_FILE), "garbage\n").unwrap();
    let bridge = connected_with_state(&cloud, &token, &state).await;
    let line = (bridge.log_json().into_iter())
        .find(|l| {
            l["message"]
                == "the client certificate saved in state_dir cannot be used; enrolling again"
        })
        .unwrap_or_else(|| panic!("no warning: {}", bridge.log_text()));
    assert!(
        line["cause"]
            .as_str()
            .is_some_and(|c| c.contains(bridge::state::CERT_FILE)),
        "{line}"
    );
    cloud.wait_log_line("bridge enrolled");
}

/// Bridge dc1 of `cloud` with `token` and `state` as its `state_dir`, once connected.
async fn connected_with_state(cloud: &Cloud, token: &str, state: &tempfile::TempDir) -> BridgeProc {
    let bridge = BridgeProc::start(
        &yaml_for(
            cloud,
            "dc1",
            &format!("state_dir: {}\n", state.path().display()),
        ),
        &[("SERVICE_BRIDGE_TOKEN", token)],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    bridge
}

/// A cloud with org acme (id 1) and a token for bridge dc1, and bridge dc1 started, connected,
/// with a certificate named `cn` of `lifetime` saved in its `state_dir` before its start.
struct SavedCertificate {
    cloud: Cloud,
    state: tempfile::TempDir,
    /// The saved certificate (PEM).
    cert: String,
    /// When it was made (compared with the time of a log line, not with when the test read it).
    made: chrono::DateTime<chrono::Utc>,
    bridge: BridgeProc,
}

impl SavedCertificate {
    async fn connect(cn: &str, lifetime: Duration) -> SavedCertificate {
        let cloud = Cloud::start(Backend::Sqlite);
        cloud.tenant("acme");
        let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
        let state = tempfile::tempdir().unwrap();
        let made = chrono::Utc::now();
        let (cert, key) = certificate_for(&cloud, cn, lifetime);
        std::fs::write(state.path().join(bridge::state::CERT_FILE), &cert).unwrap();
        std::fs::write(state.path().join(bridge::state::KEY_FILE), &key).unwrap();
        let bridge = connected_with_state(&cloud, &token, &state).await;
        SavedCertificate {
            cloud,
            state,
            cert,
            made,
            bridge,
        }
    }
}

/// A certificate of `lifetime` named `cn` (`1:dc1` is acme's dc1: acme is the first org),
/// signed with the cloud's own CA key, as enrollment would have issued it: (certificate PEM,
/// key PEM).
fn certificate_for(cloud: &Cloud, cn: &str, lifetime: Duration) -> (String, String) {
    let ca_cert = std::fs::read_to_string(cloud.ca_path()).unwrap();
    let ca_key = std::fs::read_to_string(cloud.data_dir.path().join("ca-key.pem")).unwrap();
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(&ca_cert, rcgen::KeyPair::from_pem(&ca_key).unwrap())
            .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::seconds(1);
    params.not_after = now + lifetime;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A certificate in `state_dir` issued for another bridge name (the bridge was renamed, or two
/// share the directory) is not presented, which the cloud would refuse as a wrong token: the
/// bridge enrolls for its own name at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_certificate_for_another_bridge_name_is_not_presented() {
    let saved = SavedCertificate::connect("1:dc2", Duration::from_secs(3600)).await;
    testkit::wait_until("the saved certificate left aside", || {
        saved.bridge.log_text().contains("for another bridge name")
    })
    .await;
    saved.cloud.wait_log_line("bridge enrolled");
    assert_eq!(saved.cloud.log_text().matches("bridge enrolled").count(), 1);
}

/// A `tls_cert_file` and a `tls_key_file` that are not a pair (a renewed certificate beside
/// the old key) stop the bridge at start, naming both files, rather than failing every
/// connection attempt after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_and_a_key_that_are_not_a_pair_stop_the_start() {
    let cloud = Cloud::start(Backend::Sqlite);
    let pki = OperatorPki::new("Acme operations CA");
    let cert_line = |yaml: &str, key: &str| {
        yaml.lines()
            .find(|l| l.starts_with(key))
            .unwrap()
            .to_string()
    };
    let (one, other) = (pki.client_yaml("acme:dc1"), pki.client_yaml("acme:dc2"));
    let mixed = format!(
        "{}\n{}\n",
        cert_line(&one, "tls_cert_file:"),
        cert_line(&other, "tls_key_file:")
    );
    let mut bridge = BridgeProc::start(
        &yaml_for(&cloud, "dc1", &mixed),
        &[("SERVICE_BRIDGE_TOKEN", "sigbrt_x_y")],
    );
    assert_eq!(bridge.wait(), Some(2), "{}", bridge.log_text());
    let log = bridge.log_text();
    assert!(log.contains("do not go together"), "{log}");
    assert!(
        log.contains("acme_dc1.pem") && log.contains("acme_dc2.key"),
        "{log}"
    );
}

/// A renewal the cloud refuses (the token was revoked) waits as a refused reconnect does, half
/// a minute or more, rather than enrolling again every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_is_retried_slowly() {
    // Due for renewal 9 s from now (two thirds of 15 s, backdated 1 s): the token is revoked
    // well before, once the bridge is connected.
    let SavedCertificate { cloud, bridge, .. } =
        SavedCertificate::connect("1:dc1", Duration::from_secs(14)).await;
    cloud.admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"]);
    testkit::wait_until("the failed renewal", || {
        bridge
            .log_text()
            .contains("client certificate renewal failed")
    })
    .await;
    let log = bridge.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("client certificate renewal failed"))
        .unwrap();
    let fields: serde_json::Value = serde_json::from_str(line).unwrap();
    let retry = fields["retry_in_ms"].as_u64().unwrap_or(0);
    assert!(retry >= 30_000, "retried after {retry} ms: {line}");
}

/// The bridge renews its certificate at two thirds of its lifetime, in the background: here a
/// 30 s certificate (backdated 1 s) is renewed 19 s after it was made, not at half (14 s) or
/// three quarters (21.5 s), and the tunnel carries on without a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_renewed_at_two_thirds_of_its_lifetime_without_a_reconnect() {
    let SavedCertificate {
        cloud,
        state,
        cert,
        made,
        bridge,
    } = SavedCertificate::connect("1:dc1", Duration::from_secs(29)).await;
    assert!(
        bridge
            .log_text()
            .contains("using the client certificate saved in state_dir"),
        "{}",
        bridge.log_text()
    );
    assert_eq!(cloud.log_text().matches("bridge enrolled").count(), 0);
    testkit::wait_until("the renewal", || {
        bridge
            .log_text()
            .contains("client certificate obtained by enrollment")
    })
    .await;
    let line = bridge
        .log_json()
        .into_iter()
        .find(|l| l["message"] == "client certificate obtained by enrollment")
        .expect("the renewal's log line");
    let logged = chrono::DateTime::parse_from_rfc3339(line["timestamp"].as_str().unwrap()).unwrap();
    let renewed_after = (logged.to_utc() - made).to_std().unwrap();
    assert!(
        renewed_after >= Duration::from_millis(17_500)
            && renewed_after < Duration::from_millis(21_000),
        "renewed {renewed_after:?} after making a 30 s certificate"
    );
    cloud.wait_log_line("bridge enrolled");
    // The saved certificate is the new one, and the tunnel never dropped.
    let saved = std::fs::read_to_string(state.path().join(bridge::state::CERT_FILE)).unwrap();
    assert_ne!(saved, cert);
    assert_eq!(
        bridge.metric("service_bridge_reconnections_total").await,
        0.0
    );
    assert_eq!(
        bridge.health().await.unwrap().1["connection_status"],
        "connected"
    );
}
