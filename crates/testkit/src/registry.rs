//! A real OCI registry for the registry tests: Debian's `docker-registry` (Distribution 2.8)
//! on a loopback port, with htpasswd (Basic) auth or with token auth (a token service here
//! that signs JWTs as the Docker token spec says), filled with small images built here as OCI
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
        .unwrap_or_else(|e| panic!("{program} must be installed (scripts/test installs it): {e}"));
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
        Self::start_with(|dir| {
            let htpasswd = run("htpasswd", &["-Bbn", USER, PASSWORD]);
            std::fs::write(dir.join("htpasswd"), htpasswd).expect("htpasswd");
            format!(
                "auth:\n  htpasswd:\n    realm: test-registry\n    path: {}/htpasswd\n",
                dir.display()
            )
        })
    }

    /// Starts a registry that asks for no login (as behind a front that redirects).
    pub fn start_open() -> Self {
        Self::start_with(|_| String::new())
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
        Self::start_with(|dir| {
            let bundle = dir.join("token-ca.pem");
            std::fs::write(&bundle, &tokens.cert_pem).expect("token bundle");
            format!(
                "auth:\n  token:\n    realm: {}/token\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                tokens.url,
                bundle.display()
            )
        })
    }

    fn start_with(auth: impl Fn(&Path) -> String) -> Self {
        for _ in 0..5 {
            if let Some(server) = Self::try_start(&auth) {
                return server;
            }
        }
        panic!("docker-registry did not start on any of five free ports");
    }

    fn try_start(auth: &impl Fn(&Path) -> String) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: test-only\n{auth}",
            root = dir.path().display(),
            auth = auth(dir.path())
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("config");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry must be installed (apt-get install docker-registry); scripts/test installs it");
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

    /// Pushes `image` (every architecture of an index) as `repository:tag`, straight to the
    /// registry.
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
    let layout = new_layout(dir);
    let (manifest_digest, manifest_size, layer_digest) =
        write_image(dir, &layout, "amd64", file, content);
    write_index(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        &manifest_digest,
        manifest_size,
    );
    OciImage {
        dir: layout,
        manifest_digest,
        layer_digest,
    }
}

/// Builds, in `dir`, a multi-arch image: an OCI image index over one image per
/// `(architecture, content)`. `manifest_digest` is the index's; `layer_digest` the first
/// image's layer.
pub fn oci_multi_arch(dir: &Path, file: &str, variants: &[(&str, &[u8])]) -> OciImage {
    let layout = new_layout(dir);
    let mut manifests = Vec::new();
    let mut first_layer = String::new();
    for (i, (arch, content)) in variants.iter().enumerate() {
        let work = dir.join(format!("variant-{i}"));
        std::fs::create_dir_all(&work).expect("variant dir");
        let (digest, size, layer) = write_image(&work, &layout, arch, file, content);
        if i == 0 {
            first_layer = layer;
        }
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": size,
            "platform": {"architecture": arch, "os": "linux"},
        }));
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    })
    .to_string();
    let (index_digest, index_size) = put_blob(&layout, index.as_bytes());
    write_index(
        &layout,
        "application/vnd.oci.image.index.v1+json",
        &index_digest,
        index_size,
    );
    OciImage {
        dir: layout,
        manifest_digest: index_digest,
        layer_digest: first_layer,
    }
}

fn new_layout(dir: &Path) -> PathBuf {
    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).expect("layout");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("oci-layout");
    layout
}

/// The layout's `index.json`, tagging `digest` as `latest`.
fn write_index(layout: &Path, media_type: &str, digest: &str, size: usize) {
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": media_type, "digest": digest, "size": size,
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }],
    })
    .to_string();
    std::fs::write(layout.join("index.json"), index).expect("index");
}

/// One image's layer, config and manifest into `layout`'s blobs (working files in `work`):
/// (manifest digest, manifest size, layer digest).
fn write_image(
    work: &Path,
    layout: &Path,
    arch: &str,
    file: &str,
    content: &[u8],
) -> (String, usize, String) {
    let src = work.join("src");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join(file), content).expect("layer file");
    let tar = work.join("layer.tar");
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
    run("gzip", &["-n", "-1", "-f", &tar.display().to_string()]);
    let gz = std::fs::read(work.join("layer.tar.gz")).expect("layer gz");
    let (layer_digest, layer_size) = put_blob(layout, &gz);
    let config = serde_json::json!({
        "architecture": arch, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    .to_string();
    let (config_digest, config_size) = put_blob(layout, config.as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    })
    .to_string();
    let (manifest_digest, manifest_size) = put_blob(layout, manifest.as_bytes());
    (manifest_digest, manifest_size, layer_digest)
}

/// The `service` a token registry names in its challenge.
pub const TOKEN_SERVICE: &str = "test-registry";
/// The `iss` of the tokens it accepts.
pub const TOKEN_ISSUER: &str = "testkit-token-service";

/// A token service as the Docker token spec describes it: `GET /token?service=…&scope=…` with
/// [`USER`] and [`PASSWORD`] as Basic answers `{"token":…,"expires_in":300}`, a JWT signed
/// (ES256) by a key whose self-signed certificate rides in the token's `x5c` header and is
/// the registry's `rootcertbundle`.
pub struct TokenService {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub host: String,
    /// Token requests answered, refused ones included.
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Set, the next token is issued already expired (though its answer says 300 s), as a
    /// token the registry stops taking before its time.
    pub expire_next: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cert_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Signer {
    key: ring::signature::EcdsaKeyPair,
    cert_der_b64: String,
}

impl TokenService {
    /// Starts on `127.0.0.1:0`.
    pub async fn start() -> Self {
        use base64::Engine;
        let key = rcgen::KeyPair::generate().expect("token key");
        let cert = rcgen::CertificateParams::new(vec!["token-service".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("token certificate");
        let rng = ring::rand::SystemRandom::new();
        let signer = std::sync::Arc::new(Signer {
            key: ring::signature::EcdsaKeyPair::from_pkcs8(
                &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                &key.serialize_der(),
                &rng,
            )
            .expect("ring key"),
            cert_der_b64: base64::engine::general_purpose::STANDARD.encode(cert.der()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        let expire_next = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let expire = expire_next.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (signer, counter, expire) = (signer.clone(), counter.clone(), expire.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let expired = expire.swap(false, std::sync::atomic::Ordering::SeqCst);
                        let answer = token_answer(&signer, &req, expired);
                        async move { Ok::<_, std::convert::Infallible>(answer) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        TokenService {
            url: format!("http://{addr}"),
            host: addr.to_string(),
            requests,
            expire_next,
            cert_pem: cert.pem(),
            task,
        }
    }
}

fn token_answer(
    signer: &Signer,
    req: &hyper::Request<hyper::body::Incoming>,
    expired: bool,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    use base64::Engine;
    let respond = |status: u16, body: String| {
        let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
        *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let sent = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if sent != Some(expected.as_str()) {
        return respond(401, r#"{"details":"wrong login"}"#.to_string());
    }
    let query = req.uri().query().unwrap_or("");
    let access: Vec<serde_json::Value> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "scope")
        .filter_map(|(_, scope)| {
            let mut parts = scope.rsplitn(2, ':');
            let actions = parts.next()?;
            let (kind, name) = parts.next()?.split_once(':')?;
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - if expired { 600 } else { 0 };
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [signer.cert_der_b64]});
    let claims = serde_json::json!({
        "iss": TOKEN_ISSUER, "sub": USER, "aud": TOKEN_SERVICE,
        "exp": now + 300, "nbf": now - 10, "iat": now,
        "jti": uuid::Uuid::new_v4().to_string(), "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = signer
        .key
        .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
        .expect("sign");
    let token = format!("{signing_input}.{}", b64(signature.as_ref()));
    respond(
        200,
        serde_json::json!({"token": token, "access_token": token, "expires_in": 300}).to_string(),
    )
}
