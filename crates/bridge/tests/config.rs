//! Bad configuration files: each problem named with file, line and key; exit code 2.

use std::process::Command;

use testkit::bridge::bridge_bin;

fn run(yaml: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(bridge_bin())
        .args(["run", "--config"])
        .arg(&path)
        .env_remove("SERVICE_BRIDGE_TOKEN")
        .env_remove("SERVICE_BRIDGE_NAME")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let (code, err) = run("name: dc1\ntoken: t\nheartbeat_intervall: 3\n", &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bridge.yaml:3:"), "{err}");
    assert!(err.contains("heartbeat_intervall"), "{err}");
}

#[test]
fn every_bad_value_is_reported_at_once() {
    let yaml = "name: dc1\nhealth_check_port: 70000\napi_url: ftp://x\nmax_connections: 0\n";
    let (code, err) = run(yaml, &[]);
    assert_eq!(code, Some(2));
    for needle in ["token", "health_check_port", "api_url", "max_connections"] {
        assert!(err.contains(needle), "{needle} not named in:\n{err}");
    }
    assert!(err.lines().count() >= 4, "{err}");
}

#[test]
fn a_missing_variable_is_named() {
    let yaml = "name: dc1\ntoken: t\napis:\n  - name: a\n    url: http://127.0.0.1:1\n    auth: {type: basic, username: u, password: \"${NOT_SET_ANYWHERE}\"}\n";
    let (code, err) = run(yaml, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("NOT_SET_ANYWHERE"), "{err}");
}

#[test]
fn environment_overrides_the_file() {
    // The file lacks a token; the environment supplies it, so only the bad port remains.
    let (code, err) = run(
        "name: dc1\nhealth_check_port: -1\n",
        &[("SERVICE_BRIDGE_TOKEN", "x")],
    );
    assert_eq!(code, Some(2));
    assert!(!err.contains("token"), "{err}");
    assert!(err.contains("health_check_port"), "{err}");
}

#[test]
fn audit_verify_reports_tampering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = bridge::audit::AuditLog::open(&path).unwrap();
    for i in 0..3 {
        let record = bridge::audit::AuditRecord {
            time: chrono::Utc::now(),
            request_id: format!("r{i}"),
            org: "1".into(),
            bridge: "dc1".into(),
            instance: "i".into(),
            kind: bridge::config::ResourceKind::Api,
            resource: "internal".into(),
            method: "GET".into(),
            path: "/x".into(),
            status: 200,
            bytes_in: 0,
            bytes_out: 10,
            duration_ms: 1,
            principal: "k".into(),
            decision: bridge::audit::Decision::Allowed,
            rule: "default".into(),
            event: None,
            ended: None,
            statement: None,
        };
        log.write(&record).unwrap();
    }
    drop(log);
    let verify = || {
        Command::new(bridge_bin())
            .args(["audit", "verify"])
            .arg(&path)
            .output()
            .unwrap()
    };
    assert!(verify().status.success());
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"status\":200", "\"status\":201");
    std::fs::write(&path, text).unwrap();
    // A file of log lines, with no audit record among them, is not taken for an intact log.
    let log_file = dir.path().join("bridge.log");
    std::fs::write(
        &log_file,
        "{\"level\":\"INFO\",\"message\":\"bridge started\"}\n",
    )
    .unwrap();
    let out = Command::new(bridge_bin())
        .args(["audit", "verify"])
        .arg(&log_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no audit record in it"));
    // A path that cannot be read is a usage error (2), not a tampered log (1).
    let out = Command::new(bridge_bin())
        .args(["audit", "verify"])
        .arg(dir.path().join("no-such.log"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    let out = verify();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn check(yaml: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env("INTERNAL_PW", testkit::bridge::INTERNAL_PASSWORD)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A config whose resources the connect request could not carry (the cloud reads a head of
/// 16 KiB) fails the cloud's row of `bridge check`, which said ok, and the bridge itself
/// says why it cannot connect instead of blaming the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_resources_for_the_connect_request_are_said() {
    let cloud = testkit::Cloud::start(testkit::Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let upstream = testkit::upstream::Upstream::start().await;
    let mut apis = String::from("apis:\n");
    for i in 0..300 {
        apis.push_str(&format!(
            "  - {{name: an-internal-api-with-a-rather-long-name-number-{i:04}, url: {}}}\n",
            upstream.url
        ));
    }
    let yaml = testkit::bridge::yaml_for(&cloud, "dc1", &format!("token: {token}\n{apis}"));
    let (code, out) = check(&yaml);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("more than the cloud reads in a request's head"),
        "{out}"
    );
    let bridge = testkit::bridge::BridgeProc::start(&yaml, &[]);
    testkit::wait_until("the bridge saying its connect request is too large", || {
        bridge
            .log_text()
            .contains("the cloud refused the connect request as too large")
    })
    .await;
    assert!(
        !bridge.log_text().contains("check api_url"),
        "{}",
        bridge.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tries_the_cloud_and_each_resource() {
    let cloud = testkit::Cloud::start(testkit::Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    let upstream = testkit::upstream::Upstream::start().await;
    let good = testkit::bridge::yaml_for(
        &cloud,
        "dc1",
        &format!(
            "token: {token}\napis:\n  - name: internal\n    url: {}/protected\n    auth: {{type: basic, username: svc, password: \"${{INTERNAL_PW}}\"}}\n",
            upstream.url
        ),
    );
    let (code, out) = check(&good);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok (TLS 1.3, token accepted, direct)"),
        "{out}"
    );
    // Not verifying the cloud's certificate is said beside the ok.
    let (code, out) = check(&format!("{good}tls_verify: false\n"));
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("token accepted, direct; the certificate NOT verified: tls_verify is false"),
        "{out}"
    );
    // "ok" means ready to connect: a token of another bridge is not (the cloud would refuse
    // the tunnel), nor a made-up token, nor a revoked one.
    let (code, out) = check(&good.replace("name: dc1", "name: dc2"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("this token is for bridge \"dc1\", not \"dc2\": set the config's `name:`"),
        "{out}"
    );
    // The cloud's operator sees both refusals too, with the name the bridge gave.
    let refused = cloud.wait_log_line("\"step\":\"enroll\"");
    assert!(
        refused.contains("bridge tunnel refused") && refused.contains("\"bridge\":\"dc2\""),
        "{refused}"
    );
    let made_up = good.replace(&token, "sigbrt_0123456789abcdef_00");
    let (code, out) = check(&made_up);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("token rejected (revoked or wrong)"), "{out}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let refusals = loop {
        let text = cloud.log_text();
        if text.matches("\"step\":\"enroll\"").count() >= 2 {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        !refusals.contains("sigbrt_0123456789abcdef_00"),
        "{refusals}"
    );
    cloud.admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"]);
    let (code, out) = check(&good);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("token rejected (revoked or wrong)"), "{out}");
    let good = good.replace(
        &token,
        &cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]),
    );
    let (code, out) = check(&good);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ok (HTTP 200)"), "{out}");
    let wrong_password = good.replace("${INTERNAL_PW}", "nope");
    let (code, out) = check(&wrong_password);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("credentials rejected (HTTP 401): check apis[].auth"),
        "{out}"
    );
    // A server that answers 5xx is up but failing: not "ok".
    let failing = good.replace("/protected", "/protected/failing");
    let (code, out) = check(&failing);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the server answered HTTP 502: it is reachable but failing"),
        "{out}"
    );
    // An entry with no `auth` sent none: nothing was rejected, the server wants some.
    let no_auth = good.replace(
        "\n    auth: {type: basic, username: svc, password: \"${INTERNAL_PW}\"}",
        "",
    );
    assert_ne!(no_auth, good);
    let (code, out) = check(&no_auth);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "the server asks for credentials (HTTP 401) and the entry has none: set apis[].auth"
        ),
        "{out}"
    );
    let closed = free_closed_port();
    let unreachable = good.replace(&upstream.url, &format!("http://127.0.0.1:{closed}"));
    let (code, out) = check(&unreachable);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAILED: unreachable: client error (Connect)"),
        "{out}"
    );
    assert!(out.contains("Connection refused"), "{out}");
    assert!(out.contains("is the server running"), "{out}");
    // A registry that cannot be reached: its cause is said too.
    let registry =
        format!("{good}registries:\n  - name: reg\n    url: http://127.0.0.1:{closed}\n");
    let (code, out) = check(&registry);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("cannot reach registry \"reg\": client error (Connect)")
            && out.contains("Connection refused")
            && out.contains("is the server running"),
        "{out}"
    );
    // One hint, not the forwarding's advice as well.
    assert_eq!(out.matches("Check that").count(), 0, "{out}");
    // https:// to a port that takes the connection and closes it during the handshake: said
    // so, with what to check.
    let closing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closing_port = closing.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // The client's hello read first: closed with unread bytes, the socket would send a
        // reset rather than end the stream.
        for mut stream in closing.incoming().flatten() {
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 4096]);
        }
    });
    let registry =
        format!("{good}registries:\n  - name: reg\n    url: https://127.0.0.1:{closing_port}\n");
    let (code, out) = check(&registry);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tls handshake eof. Check that the url's port speaks TLS"),
        "{out}"
    );
    // A server that takes the connection and never answers: the wait and what to check.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let quiet = good.replace(
        &upstream.url,
        &format!("http://{}", silent.local_addr().unwrap()),
    );
    let (code, out) = check(&quiet);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("no answer to GET within 10 s") && out.contains("check that apis[].url"),
        "{out}"
    );
    // https:// to a server that speaks plain HTTP: said in words, not as a debug dump.
    let plain = good.replace("http://127.0.0.1", "https://127.0.0.1");
    let (code, out) = check(&plain);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("answered in plain text, not TLS"), "{out}");
    assert!(!out.contains("Custom {"), "{out}");
    // api_url on the cloud's plain HTTP port.
    let http_port = cloud.http.rsplit(':').next().unwrap();
    let on_plain = good.replace(
        &format!("localhost:{}", cloud.tls_port()),
        &format!("localhost:{http_port}"),
    );
    let (code, out) = check(&on_plain);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("api_url must name the cloud's TLS port"),
        "{out}"
    );
}

/// A loopback port nothing listens on: port 1 (tcpmux) is reserved and never served here,
/// unlike a port bound and released, which a parallel test may take in between.
fn free_closed_port() -> u16 {
    1
}

#[test]
fn unreadable_files_the_config_names_are_configuration_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "this is not a certificate").unwrap();
    // A state_dir under a regular file cannot be made, not even by root.
    let yaml = format!(
        "name: dc1\ntoken: t\ntls_ca_file: {}\ntls_cert_file: {}\ntls_key_file: {}\naudit_log: {}\nstate_dir: {}\napis:\n  - name: a\n    url: https://a.internal\n    tls_ca_file: {0}\nregistries:\n  - name: reg\n    url: https://reg.internal\n    tls_ca_file: {0}\ndatabases:\n  - name: db\n    host: db.internal\n    database: app\n    sslmode: verify-full\n    sslrootcert: {0}\n    credentials: {{username: u, password: p}}\n",
        not_pem.display(),
        dir.path().join("missing-cert.pem").display(),
        dir.path().join("missing-key.pem").display(),
        dir.path().join("no-such-dir/audit.log").display(),
        not_pem.join("state").display(),
    );
    let (code, err) = run(&yaml, &[]);
    assert_eq!(code, Some(2), "{err}");
    let keys = [
        "tls_ca_file",
        "tls_cert_file",
        "audit_log",
        "state_dir",
        "apis[0].tls_ca_file",
        "registries[0].tls_ca_file",
        "databases[0].sslrootcert",
    ];
    for key in keys {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
    // `check` passes only what `run` takes: the same problems, the same exit code.
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    for key in keys {
        assert!(said.contains(key), "{key} not named by check in:\n{said}");
    }
    // Absolute paths need no word on where they are read from; a relative one does.
    assert!(!said.contains("working directory"), "{said}");
    let relative = yaml.replace(
        &format!(
            "audit_log: {}",
            dir.path().join("no-such-dir/audit.log").display()
        ),
        "audit_log: no-such-dir/audit.log",
    );
    std::fs::write(&path, &relative).unwrap();
    let out = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!(
            "relative paths in the configuration are read from the working directory, {}",
            dir.path().canonicalize().unwrap().display()
        )),
        "{said}"
    );
}

/// A missing `tls_ca_file` says which file belongs there: the cloud's own CA certificate.
#[test]
fn a_missing_tls_ca_file_names_the_file_that_belongs_there() {
    let (code, err) = run(
        "name: dc1\ntoken: t\ntls_ca_file: /nonexistent/ca.pem\n",
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("tls_ca_file /nonexistent/ca.pem"), "{err}");
    assert!(err.contains("ca.pem in the cloud's --data-dir"), "{err}");
}

/// `bridge check` under an open-file limit too small for `max_connections` says so (and raises
/// the soft limit to the hard one first: a soft limit alone below it is no problem).
#[test]
fn check_warns_when_the_open_file_limit_is_below_max_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{}\nhealth_check_port: 0\nmax_connections: 500\n",
        free_closed_port(),
    );
    std::fs::write(&path, yaml).unwrap();
    let check_under = |limits: &str| {
        let out = Command::new("prlimit")
            .arg(format!("--nofile={limits}"))
            .arg("--")
            .arg(bridge_bin())
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.contains("configuration: ok"), "{out}");
        out
    };
    let out = check_under("200:200");
    assert!(
        out.contains("warning: max_connections 500 needs about 564 open files"),
        "{out}"
    );
    assert!(out.contains("the open-file limit is 200"), "{out}");
    let out = check_under("200:1024");
    assert!(!out.contains("warning"), "{out}");
    // A memory ceiling the bridge is above before any stream would refuse every one.
    let yaml = std::fs::read_to_string(&path).unwrap() + "max_memory_mb: 1\n";
    std::fs::write(&path, yaml).unwrap();
    let out = check_under("200:1024");
    assert!(
        out.contains("warning: max_memory_mb 1 is no more than the bridge's own memory"),
        "{out}"
    );
}

#[test]
fn audit_verify_offers_no_config_and_check_takes_it_either_side() {
    let help = Command::new(bridge_bin())
        .args(["audit", "verify", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success() && text.contains("FILE"), "{text}");
    assert!(!text.contains("--config"), "{text}");
    // `bridge --config F check` and `bridge check --config F` both read F.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, "name: Bad Name\n").unwrap();
    for args in [
        vec!["--config", path.to_str().unwrap(), "check"],
        vec!["check", "--config", path.to_str().unwrap()],
    ] {
        let out = Command::new(bridge_bin())
            .args(&args)
            .env_remove("SERVICE_BRIDGE_TOKEN")
            .env_remove("SERVICE_BRIDGE_CONFIG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("bridge.yaml:1:7: name"), "{args:?}: {err}");
    }
}

/// Two instances on one host cannot share an audit log: their hash chains would interleave and
/// `audit verify` would call the file tampered with. The second is refused, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_cannot_share_an_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let rig = testkit::bridge::Rig::start_with(|upstream| {
        format!(
            "audit_log: {}\n{}",
            audit.display(),
            testkit::bridge::internal_api_yaml(upstream, "")
        )
    })
    .await;
    let yaml = std::fs::read_to_string(rig.bridge.dir.path().join("bridge.yaml")).unwrap();
    let (code, err) = run(
        &yaml,
        &[
            ("SERVICE_BRIDGE_TOKEN", &rig.token),
            ("INTERNAL_PW", testkit::bridge::INTERNAL_PASSWORD),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("another process writes this audit log"),
        "{err}"
    );
    assert!(err.contains(&audit.display().to_string()), "{err}");
    // `bridge check` of the running bridge's configuration only opens the file: it passes.
    let path = dir.path().join("check.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", &rig.token)
        .env("INTERNAL_PW", testkit::bridge::INTERNAL_PASSWORD)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("configuration: ok"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `bridge check | head -1`: the reader leaves after a line; check stops writing, without a
/// panic, and its exit code still says what it found (1: the cloud did not answer).
#[test]
fn check_piped_to_a_reader_that_leaves_exits_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{}\nhealth_check_port: 0\n",
        free_closed_port(),
    );
    std::fs::write(&path, yaml).unwrap();
    let mut child = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the first line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(!said.contains("panicked"), "{said}");
}

/// A `health_check_port` another process holds (a second bridge on the host) is a
/// configuration error, exit 2, saying which key to change.
#[test]
fn a_taken_health_check_port_is_a_configuration_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let state = tempfile::tempdir().unwrap();
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{}\nhealth_check_address: 127.0.0.1\nhealth_check_port: {port}\nstate_dir: {}\n",
        free_closed_port(),
        state.path().display()
    );
    let (code, err) = run(&yaml, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("configuration error: cannot listen on health_check_address 127.0.0.1 health_check_port {port}"))
            && err.contains("its own health_check_port"),
        "{err}"
    );
    // Said with the other problems of the same start, all at once, and only there.
    let file = state.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let both = yaml.replace(
        &format!("state_dir: {}", state.path().display()),
        &format!("state_dir: {}/sub", file.display()),
    );
    let (code, err) = run(&both, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("configuration error: state_dir")
            && err.contains("configuration error: cannot listen on health_check_address"),
        "{err}"
    );
    drop(taken);
}

/// A bridge restarted on a fixed health port takes it back at once, though the last run
/// closed a scraper's connection on it (which then waits out TIME_WAIT on that port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_bridge_takes_its_health_port_back() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = testkit::ports::stable_port();
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{}\nhealth_check_address: 127.0.0.1\nhealth_check_port: {port}\n",
        free_closed_port()
    );
    let mut first = testkit::bridge::BridgeProc::start(&yaml, &[]);
    assert_eq!(first.health_port(), port);
    let mut scraper = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    scraper
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    scraper.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    first.signal("TERM");
    first.wait();
    let second = testkit::bridge::BridgeProc::start(&yaml, &[]);
    assert_eq!(second.health_port(), port, "{}", second.log_text());
}
