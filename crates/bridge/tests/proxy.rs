//! Through a real HTTP CONNECT proxy (Debian's tinyproxy), with and without proxy auth. Each
//! test checks tinyproxy's own log for the CONNECT to the cloud: the cloud is on loopback, so a
//! bridge that ignored the proxy would connect as well.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::bridge::{BridgeProc, yaml_for};
use testkit::{Backend, Cloud};

/// A tinyproxy on a free loopback port; killed on drop.
struct Tinyproxy {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tinyproxy {
    /// tinyproxy cannot listen on port 0 and say which port it got, so this picks a free one
    /// and tries again with another if a parallel test took it first.
    fn start(basic_auth: Option<(&str, &str)>) -> Self {
        for _ in 0..5 {
            if let Some(proxy) = Self::try_start(basic_auth) {
                return proxy;
            }
        }
        panic!("tinyproxy did not start on any of five free ports");
    }

    fn try_start(basic_auth: Option<(&str, &str)>) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 50\nAllow 127.0.0.1\nLogLevel Connect\nLogFile \"{}/proxy.log\"\n",
            dir.path().display()
        );
        if let Some((user, pass)) = basic_auth {
            conf.push_str(&format!("BasicAuth {user} {pass}\n"));
        }
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0"))
            .unwrap_or(false);
        if is_root {
            conf.push_str("User nobody\nGroup nogroup\n");
            let _ = Command::new("chmod").args(["777"]).arg(dir.path()).status();
        }
        let path = dir.path().join("tinyproxy.conf");
        std::fs::write(&path, conf).unwrap();
        let mut child = Command::new("tinyproxy")
            .args(["-d", "-c"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "tinyproxy must be installed (apt-get install tinyproxy); scripts/test installs it",
            );
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if child.try_wait().expect("tinyproxy status").is_some() {
                return None; // the port was taken
            }
            assert!(Instant::now() < deadline, "tinyproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Something answers on the port: tinyproxy, unless a parallel test took the port
        // first, in which case tinyproxy exits.
        if child.try_wait().expect("tinyproxy status").is_some() {
            return None;
        }
        Some(Tinyproxy { child, port, dir })
    }

    /// Waits (up to 10 s) until tinyproxy has logged a CONNECT to the cloud's TLS port.
    fn wait_connect_to(&self, cloud: &Cloud) {
        let needle = format!("CONNECT localhost:{}", cloud.tls_port());
        let log = self.dir.path().join("proxy.log");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains(&needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "tinyproxy never logged {needle:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn setup() -> (Cloud, String) {
    let cloud = Cloud::start(Backend::Sqlite);
    cloud.tenant("acme");
    let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
    (cloud, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_through_a_proxy_without_auth() {
    let (cloud, token) = setup();
    let proxy = Tinyproxy::start(None);
    let yaml = yaml_for(
        &cloud,
        "dc1",
        &format!("proxy_url: http://127.0.0.1:{}\n", proxy.port),
    );
    // NO_PROXY goes with HTTPS_PROXY: it does not bypass the file's own proxy_url.
    let bridge = BridgeProc::start(
        &yaml,
        &[("SERVICE_BRIDGE_TOKEN", &token), ("NO_PROXY", "localhost")],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    proxy.wait_connect_to(&cloud);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_through_a_proxy_with_basic_auth_from_https_proxy() {
    let (cloud, token) = setup();
    let proxy = Tinyproxy::start(Some(("squiduser", "pr0xy-pass")));
    let url = format!("http://squiduser:pr0xy-pass@127.0.0.1:{}", proxy.port);
    let bridge = BridgeProc::start(
        &yaml_for(&cloud, "dc1", ""),
        &[("SERVICE_BRIDGE_TOKEN", &token), ("HTTPS_PROXY", &url)],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    proxy.wait_connect_to(&cloud);
    assert!(
        !bridge.log_text().contains("pr0xy-pass"),
        "the proxy password was logged"
    );
    // `bridge check` says which way it went, the password masked.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml_for(&cloud, "dc1", "")).unwrap();
    let out = Command::new(testkit::bridge::bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", &token)
        .env("HTTPS_PROXY", &url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let through = format!(
        "through the proxy http://squiduser:***@127.0.0.1:{}/",
        proxy.port
    );
    assert!(
        said.contains(&through) && !said.contains("pr0xy-pass"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_proxy_gives_a_clear_error() {
    let (cloud, token) = setup();
    let proxy = Tinyproxy::start(Some(("squiduser", "pr0xy-pass")));
    let yaml = yaml_for(
        &cloud,
        "dc1",
        &format!("proxy_url: http://127.0.0.1:{}\n", proxy.port),
    );
    let bridge = BridgeProc::start(&yaml, &[("SERVICE_BRIDGE_TOKEN", &token)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bridge.log_text().contains("answered 407") {
        assert!(
            Instant::now() < deadline,
            "no proxy error logged:\n{}",
            bridge.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, health) = bridge.health().await.unwrap();
    assert_eq!(code, 503);
    assert_eq!(health["connection_status"], "connecting");
    assert!(
        bridge
            .metric("service_bridge_connection_errors_total")
            .await
            >= 1.0
    );
}
