//! A private registry through the bridge, pulled with a real OCI client: Debian's `skopeo`
//! against `cloud` → tunnel → `bridge` → Debian's `docker-registry` with htpasswd auth. The
//! registry's login lives only in the bridge's config; the client logs in to the cloud with
//! the org's API key, trusting the cloud's CA through `--cert-dir`.

use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};
use testkit::bridge::Rig;
use testkit::registry::{
    OciImage, PASSWORD, RegistryServer, TokenService, USER, oci_image, oci_multi_arch,
};

struct Setup {
    rig: Rig,
    registry: RegistryServer,
    image: OciImage,
    /// Holds `ca.crt`, the cloud's CA, as `skopeo --cert-dir` wants it.
    certs: tempfile::TempDir,
}

async fn setup() -> Setup {
    let registry = RegistryServer::start();
    let work = tempfile::tempdir().unwrap();
    // 1 MiB of varied bytes, so the layer is a few hundred KiB even gzipped.
    let content: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let image = oci_image(work.path(), "hello.bin", &content);
    registry.push(&image, "team/app", "1.0");
    registry.push(&image, "team/app", "1.1");
    registry.push(&image, "team/lib", "1.0");
    let url = registry.url.clone();
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: reg\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n  - name: rw\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    allow_push: true\n"
        )
    })
    .await;
    let certs = cert_dir(&rig);
    std::mem::forget(work);
    Setup {
        rig,
        registry,
        image,
        certs,
    }
}

impl Setup {
    /// `docker://localhost:PORT/dc1/reg/{name}`: the image through the cloud.
    fn through_cloud(&self, name: &str) -> String {
        through_cloud(&self.rig, "reg", name)
    }

    /// The manifest of `name` through the cloud, as the registry stores it
    /// (`skopeo inspect --raw`).
    fn raw_manifest(&self, key: &str, name: &str) -> Value {
        let (ok, out, err) = self.skopeo(key, &["inspect", "--raw", &self.through_cloud(name)]);
        assert!(ok, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    /// `skopeo` with `key` and the cloud's CA; (success, stdout, stderr).
    fn skopeo(&self, key: &str, args: &[&str]) -> (bool, String, String) {
        skopeo(self.certs.path(), key, args)
    }
}

/// `sha256:…` of `bytes`, as a registry names a blob.
fn digest_of(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A directory holding the cloud's CA as `ca.crt`, as `--cert-dir` wants it.
fn cert_dir(rig: &Rig) -> tempfile::TempDir {
    let certs = tempfile::tempdir().unwrap();
    std::fs::copy(rig.cloud.ca_path(), certs.path().join("ca.crt")).unwrap();
    certs
}

/// `skopeo copy` of `from` to `dir:{dest}`, which must then hold `image`'s layer (skopeo has
/// checked its digest on the way).
fn pull_to_dir(
    certs: &std::path::Path,
    key: &str,
    from: &str,
    dest: &std::path::Path,
    image: &OciImage,
) {
    let (ok, _, err) = skopeo(
        certs,
        key,
        &["copy", from, &format!("dir:{}", dest.display())],
    );
    assert!(ok, "{err}");
    assert!(
        dest.join(image.layer_digest.trim_start_matches("sha256:"))
            .exists()
    );
}

/// `docker://localhost:PORT/dc1/{entry}/{name}`: an image of registries entry `entry`.
fn through_cloud(rig: &Rig, entry: &str, name: &str) -> String {
    format!(
        "docker://localhost:{}/dc1/{entry}/{name}",
        rig.cloud.tls_port()
    )
}

/// `skopeo` logging in to the cloud with `key` (any user) and trusting the CA in `certs`
/// (`ca.crt`); (success, stdout, stderr).
fn skopeo(certs: &std::path::Path, key: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("skopeo");
    cmd.arg("--insecure-policy");
    let (verb, rest) = args.split_first().unwrap();
    // copy names its source's options apart from its destination's.
    let (creds, cert_dir) = match *verb {
        "copy" => ("--src-creds", "--src-cert-dir"),
        _ => ("--creds", "--cert-dir"),
    };
    cmd.arg(verb)
        .args([creds, &format!("ci:{key}")])
        .args([cert_dir, &certs.display().to_string()])
        .args(rest);
    let out = cmd.output().expect("skopeo must be installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skopeo_inspects_lists_and_copies_an_image_through_the_cloud() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    let (ok, out, err) = s.skopeo(&key, &["inspect", &s.through_cloud("team/app:1.0")]);
    assert!(ok, "{err}");
    let inspected: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["Digest"], s.image.manifest_digest.as_str());
    assert_eq!(inspected["Layers"][0], s.image.layer_digest.as_str());

    let (ok, out, err) = s.skopeo(&key, &["list-tags", &s.through_cloud("team/app")]);
    assert!(ok, "{err}");
    let tags: Value = serde_json::from_str(&out).unwrap();
    let mut tags: Vec<&str> = tags["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    tags.sort();
    assert_eq!(tags, ["1.0", "1.1"]);

    // A copy to a directory: every blob arrives whole (checked against its digest).
    let dest = s.registry.scratch("copy");
    let (ok, _, err) = s.skopeo(
        &key,
        &[
            "copy",
            &s.through_cloud(&format!("team/app@{}", s.image.manifest_digest)),
            &format!("dir:{}", dest.display()),
        ],
    );
    assert!(ok, "{err}");
    let hex = s.image.layer_digest.trim_start_matches("sha256:");
    let layer = std::fs::read(dest.join(hex)).expect("the layer in the copy");
    assert_eq!(digest_of(&layer), s.image.layer_digest);

    // The registry's login never left the bridge, nor the API key the cloud.
    let logs = format!("{}\n{}", s.rig.bridge.log_text(), s.rig.cloud.log_text());
    assert!(!logs.contains(PASSWORD), "the registry password was logged");
    assert!(!logs.contains(&key), "the API key was logged");
    let audit = s.rig.bridge.audit_records(1).await;
    assert!(audit.iter().all(|r| r["kind"] == "registry"), "{audit:?}");
    assert!(!format!("{audit:?}").contains(PASSWORD));
    let metrics = format!(
        "{}{}",
        s.rig.bridge.metrics().await,
        s.rig.cloud.metrics_text().await
    );
    assert!(!metrics.contains(PASSWORD) && !metrics.contains(&key));

    // skopeo login (any user, the API key as password) stores the login for later commands.
    let authfile = s.registry.scratch("auth").join("auth.json");
    let authfile = authfile.display().to_string();
    let certs = s.certs.path().display().to_string();
    let registry = format!("localhost:{}", s.rig.cloud.tls_port());
    let login = Command::new("skopeo")
        .args(["login", "--authfile", &authfile, "--cert-dir", &certs])
        .args(["-u", "anyone", "--password-stdin", &registry])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(key.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    let inspect = Command::new("skopeo")
        .args(["inspect", "--authfile", &authfile, "--cert-dir", &certs])
        .arg(s.through_cloud("team/app:1.0"))
        .output()
        .unwrap();
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    // bridge check logs in as a pull would, and names a wrong login.
    let (code, out) = check(&s.rig, &bridge_yaml(&s.rig));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ok (GET /v2/ with Basic: HTTP 200)"), "{out}");
    let (code, out) = check(&s.rig, &bridge_yaml(&s.rig).replace(PASSWORD, "wrong-pw"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("login rejected (GET /v2/ with Basic: HTTP 401)"),
        "{out}"
    );
    // No auth at all on a registry that wants one: said as such, not as a wrong login.
    let without: String = bridge_yaml(&s.rig)
        .lines()
        .filter(|l| !l.trim_start().starts_with("auth:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) = check(&s.rig, &without);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("and the entry has none: set registries[].auth"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_images_other_orgs_and_pushes_get_oci_errors() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    // The registry's own error passes through: skopeo prints it.
    let (ok, _, err) = s.skopeo(&key, &["inspect", &s.through_cloud("team/nope:1.0")]);
    assert!(!ok);
    assert!(err.contains("manifest unknown"), "{err}");
    // A GET of `path` on the cloud with the key: (status, the OCI error body).
    let oci = |path: &str| {
        let request = s
            .rig
            .cloud
            .client()
            .get(format!("{}{path}", s.rig.cloud.https))
            .bearer_auth(&key);
        async move {
            let res = request.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = oci("/v2/dc1/reg/team/nope/tags/list").await;
    assert_eq!(status, 404);
    assert_eq!(body["errors"][0]["code"], "NAME_UNKNOWN", "{body}");
    // The cloud's own catalog (what `podman search` asks for) points to the registries'.
    let (status, body) = oci("/v2/_catalog").await;
    assert_eq!(status, 404);
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("/v2/BRIDGE/REGISTRY/_catalog"),
        "{body}"
    );
    // An image name without its repository (`CLOUD/dc1/reg:1.0`), or with the bridge alone
    // (`CLOUD/dc1:1.0`): the API's own words are no names, so the error says how images are
    // named (the internal registry is not asked for `/v2/manifests/1.0`).
    for path in [
        "/v2/dc1/reg/manifests/1.0",
        "/v2/dc1/manifests/1.0",
        "/v2/dc1/reg/tags/list",
    ] {
        let (status, body) = oci(path).await;
        assert_eq!(status, 404, "{path}");
        assert!(
            body["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("an image is named CLOUD/BRIDGE/REGISTRY/REPOSITORY:TAG"),
            "{path}: {body}"
        );
    }
    // Another org does not see this bridge at all.
    let other = s.rig.cloud.tenant("globex");
    let (ok, _, err) = s.skopeo(
        &other.api_key,
        &["inspect", &s.through_cloud("team/app:1.0")],
    );
    assert!(!ok);
    assert!(err.contains("name unknown"), "{err}");
    // The image named as on the registry itself, without the bridge and its entry: the
    // error says how images are named here.
    let bare = s.through_cloud("team/app:1.0").replace("/dc1/reg/", "/");
    let (ok, _, err) = s.skopeo(&key, &["inspect", &bare]);
    assert!(!ok);
    assert!(
        err.contains("an image is named CLOUD/BRIDGE/REGISTRY/REPOSITORY:TAG"),
        "{err}"
    );

    let client = s.rig.cloud.client();
    let base = format!("{}/v2", s.rig.cloud.https);
    // Without a key: 401, a Basic challenge and the OCI error body.
    let res = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(
        res.headers()["docker-distribution-api-version"],
        "registry/2.0"
    );
    let challenge = res.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "UNAUTHORIZED");
    // With it, as Basic (any user) or Bearer: 200.
    for res in [
        client
            .get(format!("{base}/"))
            .basic_auth("x", Some(&key))
            .send()
            .await
            .unwrap(),
        client
            .get(format!("{base}/"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.headers()["docker-distribution-api-version"],
            "registry/2.0"
        );
    }
    // Pushing is refused at the bridge with DENIED, and audited.
    let res = client
        .put(format!("{base}/dc1/reg/team/app/manifests/2.0"))
        .bearer_auth(&key)
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
    testkit::wait_until("the refused push's audit record", || {
        s.rig.bridge.log_json().iter().any(|r| {
            r["type"] == "audit"
                && r["decision"] == "denied"
                && r["method"] == "PUT"
                && r["rule"] == "registry: pull only"
        })
    })
    .await;
    // A DELETE is refused where pushes pass too, and its audit record says so.
    let res = client
        .delete(format!("{base}/dc1/rw/team/app/manifests/1.0"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    testkit::wait_until("the refused delete's audit record", || {
        s.rig.bridge.log_json().iter().any(|r| {
            r["type"] == "audit"
                && r["method"] == "DELETE"
                && r["rule"] == "registry: pull and push only"
        })
    })
    .await;
    // A malformed name is the caller's mistake, said as such: NAME_INVALID, not UNAVAILABLE
    // (an empty component too, which the registry would only redirect).
    for name in [
        "team%2Fapp/manifests/1.0",
        "team//app/manifests/1.0",
        "/team/app/manifests/1.0",
        "team/app/manifests/1.0/",
    ] {
        let res = client
            .get(format!("{base}/dc1/reg/{name}"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{name}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["errors"][0]["code"], "NAME_INVALID", "{name}: {body}");
    }
    // A list's next page comes back through the cloud: its Link is rewritten.
    let res = client
        .get(format!("{base}/dc1/reg/_catalog?n=1"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let link = res.headers()["link"].to_str().unwrap().to_string();
    assert!(link.starts_with("</v2/dc1/reg/_catalog?"), "{link}");
    let next = link
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string();
    let page: Value = client
        .get(format!("{}{next}", s.rig.cloud.https))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        page["repositories"],
        serde_json::json!(["team/lib"]),
        "{page}"
    );
}

/// A registry with token auth (the Docker token flow): the bridge fetches a token for each
/// scope with the entry's login, caches it, and sends it; but only from a token service the
/// entry lists in `token_hosts`, since the realm here is on another port than the registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_registry_is_pulled_with_tokens_from_listed_token_hosts_only() {
    let tokens = TokenService::start().await;
    let registry = RegistryServer::start_token(&tokens);
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "hello.txt", b"hello from a token registry\n");
    registry.push(&image, "team/app", "1.0");
    registry.push(&image, "team/other", "1.0");
    let before = tokens.requests.load(std::sync::atomic::Ordering::SeqCst);
    let (url, token_host) = (registry.url.clone(), tokens.host.clone());
    let mirror = front(registry.url.clone(), "/mirror", false).await;
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: mirror\n    url: http://{mirror}/mirror\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n  - name: unlisted\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n  - name: listed\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n  - name: pusher\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n    allow_push: true\n  - name: narrow\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n    allow_push: true\n    allow: [{{method: \"*\", path: \"/v2/team/copy/*\"}}]\n"
        )
    })
    .await;
    let certs = cert_dir(&rig);
    let key = rig.tenant.api_key.clone();

    // The challenge points elsewhere and the entry does not list it: refused, and the login
    // went nowhere.
    let res = rig
        .cloud
        .client()
        .get(format!(
            "{}/v2/dc1/unlisted/team/app/manifests/1.0",
            rig.cloud.https
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let body: Value = res.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("token_hosts"), "{message}");
    assert_eq!(
        tokens.requests.load(std::sync::atomic::Ordering::SeqCst),
        before
    );

    // Listed: skopeo pulls; one token serves both commands (same scope, cached).
    let (ok, out, err) = skopeo(
        certs.path(),
        &key,
        &["inspect", &through_cloud(&rig, "listed", "team/app:1.0")],
    );
    assert!(ok, "{err}");
    let inspected: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["Digest"], image.manifest_digest.as_str());
    pull_to_dir(
        certs.path(),
        &key,
        &through_cloud(&rig, "listed", "team/app:1.0"),
        &work.path().join("copy"),
        &image,
    );
    assert_eq!(
        tokens.requests.load(std::sync::atomic::Ordering::SeqCst),
        before + 1,
        "one token for repository:team/app:pull, then the cache"
    );
    // A token the registry refuses before its announced end is dropped, and the request sent
    // again with a new one: the pull does not fail.
    tokens
        .expire_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (ok, _, err) = skopeo(
        certs.path(),
        &key,
        &["inspect", &through_cloud(&rig, "listed", "team/other:1.0")],
    );
    assert!(ok, "{err}");
    assert_eq!(
        tokens.requests.load(std::sync::atomic::Ordering::SeqCst),
        before + 3,
        "the refused token, then one that works"
    );
    // The same under a base path: the new token is asked for the same scope (the path under
    // the entry's URL), not for none.
    tokens
        .expire_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (ok, out, err) = skopeo(
        certs.path(),
        &key,
        &["inspect", &through_cloud(&rig, "mirror", "team/app:1.0")],
    );
    assert!(ok, "{err}");
    let inspected: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["Digest"], image.manifest_digest.as_str());
    assert!(!rig.bridge.log_text().contains(PASSWORD));
    // A cross-repository mount reads its source: the token asks for both repositories, and an
    // entry whose allow rules do not let the source be read refuses it.
    let mount = |entry: &str| {
        rig.cloud
            .client()
            .post(format!(
                "{}/v2/dc1/{entry}/team/copy/blobs/uploads/?mount={}&from=team/app",
                rig.cloud.https, image.layer_digest
            ))
            .bearer_auth(&key)
            .send()
    };
    let res = mount("pusher").await.unwrap();
    assert_eq!(res.status(), 201, "mounted");
    let location = res.headers()["location"].to_str().unwrap();
    assert!(
        location.starts_with("/v2/dc1/pusher/team/copy/blobs/"),
        "{location}"
    );
    let res = mount("narrow").await.unwrap();
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
    // A path outside the entry's allow rules: the refusal says which request and entry.
    let res = rig
        .cloud
        .client()
        .get(format!(
            "{}/v2/dc1/narrow/team/app/tags/list",
            rig.cloud.https
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "GET /v2/team/app/tags/list matches no allow rule of the bridge's registries entry \"narrow\""
        ),
        "{body}"
    );

    // bridge check walks the same steps and says which one failed.
    let (code, out) = check(&rig, &bridge_yaml(&rig));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("ok (GET /v2/ with token: HTTP 200)"), "{out}");
    assert!(out.contains("token_hosts"), "{out}");
    // check is the operator's: it names the token service the bridge would not trust.
    assert!(
        out.contains(&format!("(token service: http://{}", tokens.host)),
        "{out}"
    );
    // A login the token service refuses: check names that service, which has no log to
    // point to.
    let (code, out) = check(&rig, &bridge_yaml(&rig).replace(PASSWORD, "wrong-pw"));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("refused the login (HTTP 401)"), "{out}");
    assert!(
        out.contains(&format!("(token service: http://{}", tokens.host)),
        "{out}"
    );
    assert!(!out.contains("the bridge's log"), "{out}");
}

/// A registry moved from htpasswd to token auth while the bridge runs, and back: the first pull
/// after each move learns the new challenge and is sent again as it asks, so no pull fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_moved_to_token_auth_and_back_loses_no_pull() {
    let tokens = TokenService::start().await;
    let mut registry = RegistryServer::start();
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "hello.txt", b"hello before and after\n");
    registry.push(&image, "team/app", "1.0");
    let (url, token_host) = (registry.url.clone(), tokens.host.clone());
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: reg\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n"
        )
    })
    .await;
    let tags = || {
        rig.cloud
            .client()
            .get(format!("{}/v2/dc1/reg/team/app/tags/list", rig.cloud.https))
            .bearer_auth(&rig.tenant.api_key)
            .send()
    };
    assert_eq!(tags().await.unwrap().status(), 200, "with Basic");
    let before = tokens.requests.load(std::sync::atomic::Ordering::SeqCst);
    registry.switch_to_token(&tokens);
    let res = tags().await.unwrap();
    let status = res.status();
    assert_eq!(status, 200, "{}", res.text().await.unwrap());
    assert!(tokens.requests.load(std::sync::atomic::Ordering::SeqCst) > before);
    // And back to Basic: the token it would have sent is not what the registry asks for now.
    registry.switch_to_basic();
    let res = tags().await.unwrap();
    let status = res.status();
    assert_eq!(status, 200, "{}", res.text().await.unwrap());
}

/// A token registry behind redirects on its own host (a path moved): its `/v2/` says nothing
/// (a redirect), so the challenge is learnt from the `401` at the end of the redirects, and a
/// token refused there before its end is replaced, as on the first request. Moved back to
/// Basic and to tokens again, and an open registry that starts asking for a login, it loses
/// one pull at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_registry_behind_its_own_redirects_is_pulled() {
    let tokens = TokenService::start().await;
    let mut registry = RegistryServer::start_token(&tokens);
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "blob.txt", b"a token behind two hops\n");
    registry.push(&image, "team/app", "1.0");
    registry.push(&image, "team/other", "1.0");
    let hops = front(registry.url.clone(), "", false).await;
    // A registry (by hand) whose `/v2/` answers itself and whose tags are redirected on its
    // own host (a front that asks for no login); open until `locked`, then behind a Basic
    // login.
    let locked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (opened, lock) = (listener().await, locked.clone());
    let open_host = host_of(&opened);
    serve_heads(opened, move |head| {
        let first = head.lines().next().unwrap_or_default();
        let asks = lock.load(std::sync::atomic::Ordering::SeqCst)
            && !head.to_lowercase().contains("\r\nauthorization: basic ");
        if first.contains("/v2/team/") {
            redirect("/moved/tags")
        } else if asks {
            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Basic realm=\"r\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()
        } else {
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".into()
        }
    });
    let token_host = tokens.host.clone();
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: moved\n    url: http://{hops}/hop/2\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    token_hosts: [\"{token_host}\"]\n  - name: opened\n    url: http://{open_host}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n"
        )
    })
    .await;
    let count = || tokens.requests.load(std::sync::atomic::Ordering::SeqCst);
    let get_from = |entry: &str, path: String| {
        rig.cloud
            .client()
            .get(format!("{}/v2/dc1/{entry}/{path}", rig.cloud.https))
            .bearer_auth(&rig.tenant.api_key)
            .send()
    };
    let get = |path: String| get_from("moved", path);
    let before = count();
    let res = get(format!("team/app/blobs/{}", image.layer_digest))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(digest_of(&res.bytes().await.unwrap()), image.layer_digest);
    assert_eq!(count(), before + 1, "one token, asked for once");
    // The next token the registry refuses at once: dropped at the last hop, and a new one
    // fetched.
    tokens
        .expire_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let res = get(format!("team/other/blobs/{}", image.layer_digest))
        .await
        .unwrap();
    let status = res.status();
    assert_eq!(status, 200, "{}", res.text().await.unwrap());
    assert_eq!(
        count(),
        before + 3,
        "the refused token, then one that works"
    );
    // Learnt: the next pull asks for no token it has.
    let res = get(format!("team/app/blobs/{}", image.layer_digest))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(count(), before + 3, "the cached token");

    // Moved back to Basic: the token is answered with a Basic challenge, and the pull goes on
    // with the login, for pulls under way together too (the first to hear it unlearns the
    // token flow; the others go on as it left it); then to tokens again.
    registry.switch_to_basic();
    let blob = format!("team/app/blobs/{}", image.layer_digest);
    let together = |entry: &'static str, path: String| {
        futures_util::future::join_all((0..6).map(|_| get_from(entry, path.clone())))
    };
    for res in together("moved", blob.clone()).await {
        let res = res.unwrap();
        let status = res.status();
        assert_eq!(status, 200, "{}", res.text().await.unwrap());
    }
    registry.switch_to_token(&tokens);
    let res = get(blob.clone()).await.unwrap();
    let status = res.status();
    assert_eq!(status, 200, "{}", res.text().await.unwrap());
    assert_eq!(count(), before + 4, "a token once more");

    // An open registry that starts asking for a login on a redirect: learnt again from its
    // `/v2/`, and the redirect sent once more with the login.
    let tags = || get_from("opened", "team/app/tags/list".to_string());
    assert_eq!(tags().await.unwrap().status(), 200);
    locked.store(true, std::sync::atomic::Ordering::SeqCst);
    for res in together("opened", "team/app/tags/list".to_string()).await {
        let res = res.unwrap();
        let status = res.status();
        assert_eq!(status, 200, "{}", res.text().await.unwrap());
    }
}

/// `bridge check` on `yaml` with the rig's token: (exit code, output).
fn check(rig: &Rig, yaml: &str) -> (Option<i32>, String) {
    let path = rig.bridge.dir.path().join("check.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(testkit::bridge::bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", &rig.token)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The bridge's own configuration file, as the rig wrote it.
fn bridge_yaml(rig: &Rig) -> String {
    std::fs::read_to_string(rig.bridge.dir.path().join("bridge.yaml")).unwrap()
}

/// `skopeo copy` of a local image, from a `dir:` as a pull leaves it, to the cloud, logging
/// in with `key`; (success, stderr).
fn push(certs: &std::path::Path, key: &str, image: &OciImage, dest: &str) -> (bool, String) {
    let local = image.dir.with_file_name("as-dir");
    if !local.exists() {
        testkit::registry::run(
            "skopeo",
            &[
                "--insecure-policy",
                "copy",
                &format!("oci:{}:latest", image.dir.display()),
                &format!("dir:{}", local.display()),
            ],
        );
    }
    let out = Command::new("skopeo")
        .args(["--insecure-policy", "copy"])
        .args(["--dest-creds", &format!("ci:{key}")])
        .args(["--dest-cert-dir", &certs.display().to_string()])
        .arg(format!("dir:{}", local.display()))
        .arg(dest)
        .output()
        .expect("skopeo must be installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `skopeo copy` of image `from` to `to` (each an entry and an image name) through the cloud,
/// which must mount a blob in `to`'s repository (its `POST …/blobs/uploads/?from&mount`
/// answered 201) and leave no upload to cancel (no `DELETE`).
async fn copy_mounts(s: &Setup, key: &str, from: (&str, &str), to: (&str, &str)) {
    let certs = s.certs.path().display().to_string();
    let creds = format!("ci:{key}");
    let out = Command::new("skopeo")
        .args(["--insecure-policy", "copy"])
        .args(["--src-creds", &creds, "--src-cert-dir", &certs])
        .args(["--dest-creds", &creds, "--dest-cert-dir", &certs])
        .arg(through_cloud(&s.rig, from.0, from.1))
        .arg(through_cloud(&s.rig, to.0, to.1))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let repository = to.1.split(':').next().unwrap();
    let mounted = format!("/v2/{repository}/blobs/uploads/?from&mount");
    let audit = s
        .rig
        .bridge
        .audit_records_until(
            &format!("the record of a blob mounted in {repository}"),
            |r| {
                r["method"] == "POST"
                    && r["path"].as_str().is_some_and(|p| p.ends_with(&mounted))
                    && r["status"] == 201
            },
        )
        .await;
    assert!(!audit.iter().any(|r| r["method"] == "DELETE"), "{audit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skopeo_pushes_through_the_cloud_only_where_allow_push_is_set() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "pushed.txt", b"pushed through the bridge\n");
    let (ok, err) = push(
        s.certs.path(),
        &key,
        &image,
        &through_cloud(&s.rig, "reg", "team/pushed:2.0"),
    );
    assert!(!ok, "a push through a pull-only entry succeeded");
    assert!(err.contains("denied"), "{err}");
    // allow_push: the chunked upload's Location comes back through the cloud, and the
    // registry ends up with the image.
    let (ok, err) = push(
        s.certs.path(),
        &key,
        &image,
        &through_cloud(&s.rig, "rw", "team/pushed:2.0"),
    );
    assert!(ok, "{err}");
    let direct = testkit::registry::run(
        "skopeo",
        &[
            "inspect",
            "--tls-verify=false",
            "--creds",
            &format!("{USER}:{PASSWORD}"),
            &format!("docker://{}/team/pushed:2.0", s.registry.host),
        ],
    );
    let inspected: Value = serde_json::from_str(&direct).unwrap();
    assert_eq!(inspected["Digest"], image.manifest_digest.as_str());
    // A copy to another repository of the same entry mounts the blobs the registry has
    // (the client names the source by its path through the cloud): nothing is uploaded again,
    // and no upload is left to cancel.
    copy_mounts(
        &s,
        &key,
        ("rw", "team/pushed:2.0"),
        ("rw", "team/mounted:2.0"),
    )
    .await;
    // So does a copy from a repository the client has read through another entry on the
    // same registry (a pull-only entry beside a push entry; skopeo remembers where it saw each
    // layer, and names that repository): the layer is mounted, not uploaded again.
    let pulled = work.path().join("pulled");
    pull_to_dir(
        s.certs.path(),
        &key,
        &through_cloud(&s.rig, "reg", "team/app:1.0"),
        &pulled,
        &s.image,
    );
    copy_mounts(
        &s,
        &key,
        ("reg", "team/app:1.0"),
        ("rw", "team/from-reg:1.0"),
    )
    .await;
    // An upload's Location names the cloud's path, never the registry's own URL.
    let res = s
        .rig
        .cloud
        .client()
        .post(format!(
            "{}/v2/dc1/rw/team/other/blobs/uploads/",
            s.rig.cloud.https
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let location = res.headers()["location"].to_str().unwrap();
    assert!(
        location.starts_with("/v2/dc1/rw/team/other/blobs/uploads/"),
        "{location}"
    );
    // The registry would read a mount's `from` from a form body too, unchecked: refused.
    let res = s
        .rig
        .cloud
        .client()
        .post(format!(
            "{}/v2/dc1/rw/team/other/blobs/uploads/?mount={}",
            s.rig.cloud.https, image.layer_digest
        ))
        .bearer_auth(&key)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("from=secret/db")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "DENIED", "{body}");
}

/// A front like an S3-backed registry's: blob downloads answer `307` to `storage` (here the
/// registry itself, on another port), everything else is passed to it. Returns its address.
async fn redirecting_front(storage: String) -> std::net::SocketAddr {
    front(storage, "", true).await
}

/// A front serving the registry at `storage` under the base path `prefix` (as Artifactory
/// serves its registries: `/artifactory/api/docker/REPO/v2/…`); with `redirect_blobs`, blob
/// downloads answer `307` to `storage` instead. Under `/hop/N/…` it answers `307` to
/// `/hop/N-1/…` on itself, and serves `/hop/0/…` as `…`: a chain of N redirects. Returns its
/// address.
async fn front(
    storage: String,
    prefix: &'static str,
    redirect_blobs: bool,
) -> std::net::SocketAddr {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (client, storage) = (client.clone(), storage.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (client, storage) = (client.clone(), storage.clone());
                        async move {
                            let asked = req.uri().path_and_query().map_or("/", |p| p.as_str());
                            let (hops, asked) = match asked.strip_prefix("/hop/") {
                                Some(rest) => {
                                    let (n, rest) = rest.split_once('/').unwrap();
                                    (n.parse::<u32>().unwrap(), format!("/{rest}"))
                                }
                                None => (0, asked.to_string()),
                            };
                            if hops > 0 {
                                let mut r = hyper::Response::new(
                                    Empty::new().map_err(|n| match n {}).boxed(),
                                );
                                *r.status_mut() = hyper::StatusCode::TEMPORARY_REDIRECT;
                                let next = format!("/hop/{}{asked}", hops - 1);
                                r.headers_mut().insert("location", next.parse().unwrap());
                                return Ok::<_, hyper::Error>(r);
                            }
                            let Some(under) = asked.strip_prefix(prefix) else {
                                let mut r = hyper::Response::new(
                                    Empty::new().map_err(|n| match n {}).boxed(),
                                );
                                *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                return Ok::<_, hyper::Error>(r);
                            };
                            let target = format!("{storage}{under}");
                            if redirect_blobs && req.uri().path().contains("/blobs/sha256:") {
                                let mut r = hyper::Response::new(
                                    Empty::new().map_err(|n| match n {}).boxed(),
                                );
                                *r.status_mut() = hyper::StatusCode::TEMPORARY_REDIRECT;
                                r.headers_mut().insert("location", target.parse().unwrap());
                                return Ok::<_, hyper::Error>(r);
                            }
                            let mut ahead =
                                hyper::Request::builder().method(req.method()).uri(target);
                            for (k, v) in req.headers() {
                                if k != "host" {
                                    ahead = ahead.header(k, v);
                                }
                            }
                            let answer = client
                                .request(ahead.body(Empty::new()).unwrap())
                                .await
                                .unwrap();
                            Ok(answer.map(|b| b.boxed()))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// Blob downloads that a registry redirects to its storage: the bridge follows them itself to
/// a `redirect_hosts` entry, and refuses any other (502), never passing the internal URL on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_at_the_bridge_to_listed_hosts_only() {
    let storage = RegistryServer::start_open();
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "blob.txt", b"served from the storage host\n");
    storage.push_open(&image, "team/app", "1.0");
    let front = redirecting_front(storage.url.clone()).await;
    let storage_host = storage.host.clone();
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: listed\n    url: http://{front}\n    redirect_hosts: [\"{storage_host}\"]\n  - name: unlisted\n    url: http://{front}\n"
        )
    })
    .await;
    let certs = cert_dir(&rig);
    let key = rig.tenant.api_key.clone();
    pull_to_dir(
        certs.path(),
        &key,
        &through_cloud(&rig, "listed", "team/app:1.0"),
        &work.path().join("copy"),
        &image,
    );

    let blob = format!(
        "{}/v2/dc1/unlisted/team/app/blobs/{}",
        rig.cloud.https, image.layer_digest
    );
    let res = rig
        .cloud
        .client()
        .get(&blob)
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    assert!(res.headers().get("location").is_none());
    let body: Value = res.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("redirect_hosts"), "{message}");
    assert!(
        !message.contains(&storage.host),
        "the internal host leaked: {message}"
    );
    // The operator is told which host, in a line that may still be on its way to us.
    testkit::wait_until("a log line naming the redirect's host", || {
        rig.bridge.log_text().contains(&storage.host)
    })
    .await;
}

/// A registry behind a login that redirects to its own host (a path moved, a front that
/// normalises): the bridge follows with the entry's login, so the pull works instead of
/// failing as if the login were wrong. A `redirect_hosts` entry on another host never gets it,
/// nor does the registry's origin when such a host sends the request back there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_to_the_registry_itself_keep_the_login() {
    let registry = RegistryServer::start();
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "blob.txt", b"two hops behind a login\n");
    registry.push(&image, "team/app", "1.0");
    let hops = front(registry.url.clone(), "", false).await;
    let storage = redirecting_front(registry.url.clone()).await;
    let registry_host = registry.host.clone();
    // A registry (by hand: `/v2/` answers 200 to any login, 401 without) whose downloads go
    // to a storage host that sends them back to the registry's origin, to a path of its
    // choosing (`/moved`), which the registry redirects on to `/v2/`.
    let (bounced, bouncer) = (listener().await, listener().await);
    let (bounced_host, bouncer_host) = (host_of(&bounced), host_of(&bouncer));
    let to_storage = format!("http://{bouncer_host}/b");
    serve_heads(bounced, move |head| {
        let first = head.lines().next().unwrap_or_default();
        if first.contains("/blobs/") {
            redirect(&to_storage)
        } else if first.contains("/moved") {
            redirect("/v2/")
        } else if head.to_lowercase().contains("\r\nauthorization:") {
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".into()
        } else {
            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Basic realm=\"r\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()
        }
    });
    let back = format!("http://{bounced_host}/moved");
    serve_heads(bouncer, move |_| redirect(&back));
    let bounced = bounced_host;
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: moved\n    url: http://{hops}/hop/2\n    auth: {{username: {USER}, password: {PASSWORD}}}\n  - name: stored\n    url: http://{storage}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    redirect_hosts: [\"{registry_host}\"]\n  - name: bounced\n    url: http://{bounced}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    redirect_hosts: [\"{bouncer_host}\"]\n"
        )
    })
    .await;
    let key = rig.tenant.api_key.clone();
    let blob = |entry: &str| {
        format!(
            "{}/v2/dc1/{entry}/team/app/blobs/{}",
            rig.cloud.https, image.layer_digest
        )
    };
    let res = rig
        .cloud
        .client()
        .get(blob("moved"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(digest_of(&res.bytes().await.unwrap()), image.layer_digest);
    // The storage host is another origin: it gets no login, and this registry wants one; nor
    // does the registry's origin when the storage host chose the path, nor on the registry's
    // own redirect after that.
    for entry in ["stored", "bounced"] {
        let res = rig
            .cloud
            .client()
            .get(blob(entry))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 502, "{entry}");
    }
}

async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

fn host_of(listener: &tokio::net::TcpListener) -> String {
    listener.local_addr().unwrap().to_string()
}

/// A `307` to `location`, closing the connection.
fn redirect(location: &str) -> String {
    format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
}

/// Serves `listener` by hand: each connection's first request head goes to `answer`, whose
/// whole answer is written back before the connection closes.
fn serve_heads(
    listener: tokio::net::TcpListener,
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = answer(&String::from_utf8_lossy(&head));
                let _ = tcp.write_all(reply.as_bytes()).await;
            });
        }
    });
}

/// A registry (or a debugging proxy before it) that repeats the entry's Basic login in an
/// answer's header loses that header before the answer reaches the caller, and the bridge's
/// log says so, as for an API or a Git source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_echoing_the_login_loses_that_header() {
    let echo = listener().await;
    let host = host_of(&echo);
    serve_heads(echo, |head| {
        let auth = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("authorization: ")
                    .or(l.strip_prefix("Authorization: "))
            })
            .map(str::trim);
        match auth {
            None => "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Basic realm=\"r\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
            Some(auth) => format!(
                "HTTP/1.1 200 OK\r\nx-debug-auth: {auth}\r\nx-kept: 1\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
            ),
        }
    });
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: echo\n    url: http://{host}\n    auth: {{username: puller, password: echo-REGPW-0001}}\n"
        )
    })
    .await;
    let res = rig
        .cloud
        .client()
        .get(format!(
            "{}/v2/dc1/echo/team/app/manifests/1.0",
            rig.cloud.https
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-kept"], "1");
    assert!(
        res.headers().get("x-debug-auth").is_none(),
        "{:?}",
        res.headers()
    );
    testkit::wait_until("the log line naming the echoing header", || {
        let log = rig.bridge.log_text();
        log.contains("echoed the entry's credentials") && log.contains("x-debug-auth")
    })
    .await;
    assert!(!rig.bridge.log_text().contains("echo-REGPW-0001"));
}

/// A chain of redirects on the registry's own host is followed up to five long; a sixth
/// redirect is a 502 that says so, not a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_redirects_are_followed_and_a_sixth_is_refused() {
    let storage = RegistryServer::start_open();
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "blob.txt", b"five hops away\n");
    storage.push_open(&image, "team/app", "1.0");
    let front = front(storage.url.clone(), "", false).await;
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: five\n    url: http://{front}/hop/5\n  - name: six\n    url: http://{front}/hop/6\n"
        )
    })
    .await;
    let key = rig.tenant.api_key.clone();
    let blob = |entry: &str| {
        format!(
            "{}/v2/dc1/{entry}/team/app/blobs/{}",
            rig.cloud.https, image.layer_digest
        )
    };
    let fetch = |entry: &str| rig.cloud.client().get(blob(entry)).bearer_auth(&key).send();
    let res = fetch("five").await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(digest_of(&res.bytes().await.unwrap()), image.layer_digest);

    let res = fetch("six").await.unwrap();
    assert_eq!(res.status(), 502);
    let body: Value = res.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("more than 5 times"), "{message}");
}

/// A registry that cannot be reached is a `502` that names neither its host nor its port; the
/// bridge's log names them, for its operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_is_named_in_the_log_not_to_the_caller() {
    let (socket, port) = testkit::refusing_port();
    let rig = Rig::start_with(move |_| {
        format!("registries:\n  - name: gone\n    url: http://127.0.0.1:{port}\n")
    })
    .await;
    let res = rig
        .cloud
        .client()
        .get(format!(
            "{}/v2/dc1/gone/team/app/manifests/1.0",
            rig.cloud.https
        ))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let body: Value = res.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot reach registry \"gone\""),
        "{message}"
    );
    assert!(!message.contains(&port.to_string()), "{message}");
    let target = format!("127.0.0.1:{port}");
    testkit::wait_until("a warning naming the registry's host and port", || {
        rig.bridge.log_json().iter().any(|l| {
            l["message"] == "registry unreachable"
                && l["registry"] == "gone"
                && l["target"] == target.as_str()
        })
    })
    .await;
    drop(socket);
}

/// What passes unchanged: a multi-arch index (inspected raw and copied whole), `HEAD` on a
/// manifest with its digest, and a ranged blob fetch (a resumed pull).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_heads_and_ranges_pass_unchanged() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    let work = tempfile::tempdir().unwrap();
    let multi = oci_multi_arch(
        work.path(),
        "arch.txt",
        &[
            ("amd64", b"built for amd64\n"),
            ("arm64", b"built for arm64\n"),
        ],
    );
    s.registry.push(&multi, "team/multi", "1.0");
    let index = s.raw_manifest(&key, "team/multi:1.0");
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let arches: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    // The same images as Docker's manifest list and schema 2 manifests pass as they are too.
    s.registry.push_as(&multi, "team/dockerlist", "1.0", "v2s2");
    let list = s.raw_manifest(&key, "team/dockerlist:1.0");
    assert_eq!(
        list["mediaType"],
        "application/vnd.docker.distribution.manifest.list.v2+json"
    );
    assert_eq!(list["manifests"].as_array().unwrap().len(), 2);
    let dest = work.path().join("all");
    let (ok, _, err) = s.skopeo(
        &key,
        &[
            "copy",
            "--all",
            &s.through_cloud("team/multi:1.0"),
            &format!("oci:{}:1.0", dest.display()),
        ],
    );
    assert!(ok, "{err}");
    let copied = std::fs::read_dir(dest.join("blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(
        copied, 7,
        "the index, two manifests, two configs, two layers"
    );

    let client = s.rig.cloud.client();
    let base = format!("{}/v2/dc1/reg", s.rig.cloud.https);
    let head = client
        .head(format!("{base}/team/multi/manifests/1.0"))
        .bearer_auth(&key)
        .header("accept", "application/vnd.oci.image.index.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["docker-content-digest"],
        multi.manifest_digest.as_str()
    );
    let blob = format!("{base}/team/app/blobs/{}", s.image.layer_digest);
    let whole = client
        .get(&blob)
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let resumed = client
        .get(&blob)
        .bearer_auth(&key)
        .header("range", "bytes=1000-")
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 206);
    assert_eq!(resumed.bytes().await.unwrap(), whole.slice(1000..));
}

/// A layer of 200 MiB streams through cloud and bridge (the copy checks its digest, so every
/// byte arrived). Its time and the processes' memory are measured by `bench registry`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mib_layer_is_pulled_whole() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    let work = tempfile::tempdir().unwrap();
    let content = {
        use rand::RngCore;
        let mut bytes = vec![0u8; 200 << 20];
        rand::rng().fill_bytes(&mut bytes);
        bytes
    };
    let image = oci_image(work.path(), "big.bin", &content);
    drop(content);
    s.registry.push(&image, "team/big", "1.0");
    let dest = work.path().join("copy");
    let (ok, _, err) = s.skopeo(
        &key,
        &[
            "copy",
            &s.through_cloud("team/big:1.0"),
            &format!("dir:{}", dest.display()),
        ],
    );
    assert!(ok, "{err}");
    let layer = dest.join(image.layer_digest.trim_start_matches("sha256:"));
    assert!(
        std::fs::metadata(&layer).unwrap().len() > 200 << 20,
        "random bytes do not compress"
    );
}

/// `podman pull` through the cloud, into a private store (root and run root of its own, and the
/// `containers.conf` this machine needs: runc, cgroupfs, file events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_pulls_through_the_cloud() {
    let s = setup().await;
    let key = s.rig.tenant.api_key.clone();
    let store = s.registry.scratch("podman");
    let conf = store.join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n",
    )
    .unwrap();
    let image = format!("localhost:{}/dc1/reg/team/app:1.0", s.rig.cloud.tls_port());
    let podman = |args: &[&str]| {
        Command::new("podman")
            .env("CONTAINERS_CONF", &conf)
            .args(["--root", &store.join("root").display().to_string()])
            .args(["--runroot", &store.join("run").display().to_string()])
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .expect("podman must be installed (scripts/test installs it)")
    };
    // podman login: any user, the API key as password; then a pull that uses it.
    let authfile = store.join("auth.json").display().to_string();
    let certs = s.certs.path().display().to_string();
    let registry = format!("localhost:{}", s.rig.cloud.tls_port());
    let out = podman(&[
        "login",
        "--authfile",
        &authfile,
        "--cert-dir",
        &certs,
        "-u",
        "anyone",
        "-p",
        &key,
        &registry,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = podman(&[
        "pull",
        "--authfile",
        &authfile,
        "--cert-dir",
        &certs,
        &image,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = podman(&["image", "inspect", "--format", "{{.Digest}}", &image]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        s.image.manifest_digest
    );
}

/// An internal registry on HTTPS with a private CA: the entry's `tls_ca_file` trusts it (its
/// token service and redirect hosts too); an entry without it is refused by the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_registry_on_a_private_ca_is_trusted_through_its_tls_ca_file() {
    let ca = testkit::tls::TestCa::new();
    let registry = RegistryServer::start_tls(&ca);
    let work = tempfile::tempdir().unwrap();
    let image = oci_image(work.path(), "hello.bin", b"over https");
    registry.push(&image, "team/app", "1.0");
    let ca_file = ca.write_pem(work.path(), "registry-ca.pem");
    let (url, ca_file) = (registry.url.clone(), ca_file.display().to_string());
    let rig = Rig::start_with(move |_| {
        format!(
            "registries:\n  - name: reg\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n    tls_ca_file: {ca_file}\n  - name: untrusted\n    url: {url}\n    auth: {{username: {USER}, password: {PASSWORD}}}\n"
        )
    })
    .await;
    let certs = cert_dir(&rig);
    let key = &rig.tenant.api_key;
    let (ok, manifest, err) = skopeo(
        certs.path(),
        key,
        &[
            "inspect",
            "--raw",
            &through_cloud(&rig, "reg", "team/app:1.0"),
        ],
    );
    assert!(ok, "{err}");
    assert!(manifest.contains(&image.layer_digest), "{manifest}");
    let (ok, _, err) = skopeo(
        certs.path(),
        key,
        &[
            "inspect",
            "--raw",
            &through_cloud(&rig, "untrusted", "team/app:1.0"),
        ],
    );
    assert!(!ok && err.contains("502"), "{err}");
    // skopeo prints no body with a 502: the OCI error says what to set.
    let answer = reqwest::Client::new()
        .get(format!(
            "{}/v2/dc1/untrusted/team/app/manifests/1.0",
            rig.cloud.http
        ))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502);
    let body = answer.text().await.unwrap();
    assert!(body.contains("tls_ca_file"), "{body}");
}
