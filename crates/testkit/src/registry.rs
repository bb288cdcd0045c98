//! A real OCI registry for the registry tests: Debian's `docker-registry` (Distribution 2.8)
//! with htpasswd (Basic) auth on a loopback port, filled with small images built here as OCI
//! layouts and pushed with `skopeo`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The registry's login.
pub const USER: &str = "puller";
/// Its password.
pub const PASSWORD: &str = "r3gistry-pw";

/// A running `docker-registry`; killed on drop.
pub struct RegistryServer {
    child: Child,
    /// `http://127.0.0.1:PORT`
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
        .unwrap_or_else(|e| panic!("{program} must be installed (.ci/run installs it): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RegistryServer {
    /// Starts a registry that takes [`USER`] and [`PASSWORD`] as HTTP Basic.
    pub fn start() -> Self {
        for _ in 0..5 {
            if let Some(server) = Self::try_start() {
                return server;
            }
        }
        panic!("docker-registry did not start on any of five free ports");
    }

    fn try_start() -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let htpasswd = run("htpasswd", &["-Bbn", USER, PASSWORD]);
        std::fs::write(dir.path().join("htpasswd"), htpasswd).expect("htpasswd");
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: test-only\nauth:\n  htpasswd:\n    realm: test-registry\n    path: {root}/htpasswd\n",
            root = dir.path().display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("config");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry must be installed (apt-get install docker-registry); .ci/run installs it");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if child.try_wait().expect("registry status").is_some() {
                return None; // the port was taken
            }
            assert!(Instant::now() < deadline, "docker-registry did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().expect("registry status").is_some() {
            return None;
        }
        Some(RegistryServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            host: format!("127.0.0.1:{port}"),
            dir,
        })
    }

    /// Pushes `image` as `repository:tag`, straight to the registry.
    pub fn push(&self, image: &OciImage, repository: &str, tag: &str) {
        run(
            "skopeo",
            &[
                "--insecure-policy",
                "copy",
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

/// A one-layer image in an OCI layout, tagged `latest`.
pub struct OciImage {
    /// The layout's directory.
    pub dir: PathBuf,
    /// `sha256:…` of the image manifest.
    pub manifest_digest: String,
    /// `sha256:…` of the (gzipped) layer.
    pub layer_digest: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn put_blob(dir: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = sha256_hex(bytes);
    std::fs::write(dir.join("blobs/sha256").join(&hex), bytes).expect("blob");
    (format!("sha256:{hex}"), bytes.len())
}

/// Builds, in `dir`, an image whose one layer holds `file` with `content`.
pub fn oci_image(dir: &Path, file: &str, content: &[u8]) -> OciImage {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join(file), content).expect("layer file");
    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).expect("layout");
    let tar = dir.join("layer.tar");
    run(
        "tar",
        &[
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
            &tar.display().to_string(),
            "-C",
            &src.display().to_string(),
            ".",
        ],
    );
    let tar_bytes = std::fs::read(&tar).expect("layer tar");
    let diff_id = format!("sha256:{}", sha256_hex(&tar_bytes));
    run("gzip", &["-n", "-f", &tar.display().to_string()]);
    let gz = std::fs::read(dir.join("layer.tar.gz")).expect("layer gz");
    let (layer_digest, layer_size) = put_blob(&layout, &gz);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    .to_string();
    let (config_digest, config_size) = put_blob(&layout, config.as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    })
    .to_string();
    let (manifest_digest, manifest_size) = put_blob(&layout, manifest.as_bytes());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest_size,
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }],
    })
    .to_string();
    std::fs::write(layout.join("index.json"), index).expect("index");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("oci-layout");
    OciImage {
        dir: layout,
        manifest_digest,
        layer_digest,
    }
}
