//! A real OCI registry for the registry tests: Debian's `docker-registry` (Distribution 2.8)
//! on a loopback port, with htpasswd (Basic) auth or with token auth (a token service here
//! that signs JWTs as the Docker token spec says), filled with small images built here as OCI
//! layouts and pushed with `skopeo`.

mod image;
mod token;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use image::{OciImage, oci_image, oci_multi_arch};
pub use token::{TOKEN_ISSUER, TOKEN_SERVICE, TokenService};

/// The registry's login.
pub const USER: &str = "puller";
/// Its password.
pub const PASSWORD: &str = "r3gistry-pw";

/// A running `docker-registry`; killed on drop.
pub struct RegistryServer {
    child: Child,
    /// `http://127.0.0.1:PORT` (`https://` when started with TLS)
    pub url: String,
    /// `127.0.0.1:PORT`, as image names start.
    pub host: String,
    dir: tempfile::TempDir,
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `program` with `args`; panics with its output when it fails.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} must be installed (scripts/test installs it): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `auth` section of a registry that takes [`USER`] and [`PASSWORD`] as HTTP Basic, its
/// htpasswd file written into `dir`.
fn htpasswd_auth(dir: &Path) -> String {
    let htpasswd = run("htpasswd", &["-Bbn", USER, PASSWORD]);
    std::fs::write(dir.join("htpasswd"), htpasswd).expect("htpasswd");
    format!(
        "auth:\n  htpasswd:\n    realm: test-registry\n    path: {}/htpasswd\n",
        dir.display()
    )
}

impl RegistryServer {
    /// Starts a registry that takes [`USER`] and [`PASSWORD`] as HTTP Basic.
    pub fn start() -> Self {
        Self::start_with(htpasswd_auth)
    }

    /// Starts a registry that asks for no login (as behind a front that redirects).
    pub fn start_open() -> Self {
        Self::start_with(|_| String::new())
    }

    /// [`RegistryServer::start`] over HTTPS, with a certificate for `127.0.0.1` that `ca`
    /// signed: an internal registry on a private CA.
    pub fn start_tls(ca: &crate::tls::TestCa) -> Self {
        let (cert, key) = ca.server_pem("127.0.0.1");
        Self::start_tls_with(Some((&cert, &key)), htpasswd_auth)
    }

    /// Pushes `image` as `repository:tag` to a registry without a login.
    pub fn push_open(&self, image: &OciImage, repository: &str, tag: &str) {
        run(
            "skopeo",
            &[
                "--insecure-policy",
                "copy",
                "--dest-tls-verify=false",
                &format!("oci:{}:latest", image.dir.display()),
                &format!("docker://{}/{repository}:{tag}", self.host),
            ],
        );
    }

    /// Starts a registry with token auth: its challenge sends clients to `tokens`, whose
    /// signing certificate it trusts.
    pub fn start_token(tokens: &TokenService) -> Self {
        Self::start_with(|dir| token_auth(dir, tokens))
    }

    /// Restarts this registry, on its port and with its images, with token auth from
    /// `tokens`: as an operator moves a registry from htpasswd to a token service.
    pub fn switch_to_token(&mut self, tokens: &TokenService) {
        let auth = token_auth(self.dir.path(), tokens);
        self.switch_auth(&auth);
    }

    /// Restarts this registry, on its port and with its images, with HTTP Basic again: as an
    /// operator moves a registry back from a token service.
    pub fn switch_to_basic(&mut self) {
        let auth = htpasswd_auth(self.dir.path());
        self.switch_auth(&auth);
    }

    /// Restarts this registry with `auth` as its configuration's `auth` section.
    fn switch_auth(&mut self, auth: &str) {
        let config_path = self.dir.path().join("config.yml");
        let config = std::fs::read_to_string(&config_path).expect("config");
        let head = config.split("auth:").next().unwrap_or(&config).to_string();
        std::fs::write(&config_path, head + auth).expect("config");
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = serve(&config_path, &self.host)
            .unwrap_or_else(|| panic!("docker-registry did not start again on {}", self.host));
    }

    fn start_with(auth: impl Fn(&Path) -> String) -> Self {
        Self::start_tls_with(None, auth)
    }

    /// A registry with `auth`'s configuration, over HTTPS with `tls` (certificate and key,
    /// PEM) when given.
    fn start_tls_with(tls: Option<(&str, &str)>, auth: impl Fn(&Path) -> String) -> Self {
        for _ in 0..5 {
            if let Some(server) = Self::try_start(tls, &auth) {
                return server;
            }
        }
        panic!("docker-registry did not start on any of five free ports");
    }

    fn try_start(tls: Option<(&str, &str)>, auth: &impl Fn(&Path) -> String) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let https = match tls {
            Some((cert, key)) => {
                std::fs::write(dir.path().join("cert.pem"), cert).expect("cert");
                std::fs::write(dir.path().join("key.pem"), key).expect("key");
                format!(
                    "  tls:\n    certificate: {root}/cert.pem\n    key: {root}/key.pem\n",
                    root = dir.path().display()
                )
            }
            None => String::new(),
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: test-only\n{https}{auth}",
            root = dir.path().display(),
            auth = auth(dir.path())
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("config");
        let host = format!("127.0.0.1:{port}");
        let child = serve(&config_path, &host)?;
        Some(RegistryServer {
            child,
            url: format!(
                "{}://127.0.0.1:{port}",
                if tls.is_some() { "https" } else { "http" }
            ),
            host,
            dir,
        })
    }

    /// Pushes `image` (every architecture of an index) as `repository:tag`, straight to the
    /// registry (with Basic, or a token from [`TokenService`]).
    pub fn push(&self, image: &OciImage, repository: &str, tag: &str) {
        self.push_as(image, repository, tag, "oci");
    }

    /// [`RegistryServer::push`] with skopeo's `--format` (`oci`, or `v2s2` for Docker's
    /// manifests, an index becoming a Docker manifest list).
    pub fn push_as(&self, image: &OciImage, repository: &str, tag: &str, format: &str) {
        run(
            "skopeo",
            &[
                "--insecure-policy",
                "copy",
                "--all",
                "--format",
                format,
                "--dest-tls-verify=false",
                "--dest-creds",
                &format!("{USER}:{PASSWORD}"),
                &format!("oci:{}:latest", image.dir.display()),
                &format!("docker://{}/{repository}:{tag}", self.host),
            ],
        );
    }

    /// A directory of this server's, for files a test writes beside it.
    pub fn scratch(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("scratch dir");
        path
    }
}

/// The `auth:` section of a registry that takes tokens from `tokens`, whose signing
/// certificate it trusts (written into `dir`).
fn token_auth(dir: &Path, tokens: &TokenService) -> String {
    let bundle = dir.join("token-ca.pem");
    std::fs::write(&bundle, &tokens.cert_pem).expect("token bundle");
    format!(
        "auth:\n  token:\n    realm: {}/token\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
        tokens.url,
        bundle.display()
    )
}

/// Runs `docker-registry serve CONFIG` and waits (up to 20 s) until it answers on `host`;
/// `None` when it exited instead (its port was taken).
fn serve(config_path: &Path, host: &str) -> Option<Child> {
    let mut child = Command::new("docker-registry")
        .arg("serve")
        .arg(config_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry must be installed (apt-get install docker-registry); scripts/test installs it");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(host).is_err() {
        if child.try_wait().expect("registry status").is_some() {
            return None;
        }
        assert!(Instant::now() < deadline, "docker-registry did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Started, or exited just as another process answered on the port.
    child
        .try_wait()
        .expect("registry status")
        .is_none()
        .then_some(child)
}
