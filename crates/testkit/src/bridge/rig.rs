//! The standard rig of the bridge tests: a cloud, an org, an internal API and a bridge that
//! declares it, connected, with shortcuts for requests through the tunnel.

use std::time::Duration;

use super::{BridgeProc, yaml_for};
use crate::Cloud;

/// Starts a bridge with `yaml`, its `token` and the standard internal API's password, and
/// waits (up to 20 s) until its tunnel is up.
pub async fn start_connected(yaml: &str, token: &str) -> BridgeProc {
    let bridge = BridgeProc::start(
        yaml,
        &[
            ("SERVICE_BRIDGE_TOKEN", token),
            ("INTERNAL_PW", INTERNAL_PASSWORD),
        ],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    bridge
}

/// Password of the standard internal API, injected by the bridge.
pub const INTERNAL_PASSWORD: &str = "s3cret-internal-pw";

/// A cloud, an org with keys, an internal API, and a bridge declaring it, connected.
pub struct Rig {
    /// The service.
    pub cloud: Cloud,
    /// The org's keys.
    pub tenant: crate::Tenant,
    /// The bridge token.
    pub token: String,
    /// The internal API.
    pub upstream: crate::upstream::Upstream,
    /// The bridge process.
    pub bridge: BridgeProc,
}

/// The `apis:` block declaring `upstream` as `internal` with basic auth.
pub fn internal_api_yaml(upstream: &crate::upstream::Upstream, extra: &str) -> String {
    format!(
        "apis:\n  - name: internal\n    url: {}\n    auth: {{type: basic, username: svc, password: \"${{INTERNAL_PW}}\"}}\n{extra}",
        upstream.url
    )
}

impl Rig {
    /// Starts everything with `api_extra` appended to the api entry, and waits for the tunnel.
    pub async fn start(api_extra: &str) -> Rig {
        Self::start_with(|upstream| internal_api_yaml(upstream, api_extra)).await
    }

    /// [`Rig::start`] on the given storage, for the tests whose subject (bridge tokens,
    /// enrollment, the CA) lives in it.
    pub async fn start_on(backend: crate::Backend, api_extra: &str) -> Rig {
        Self::start_full(backend, &[], |upstream| {
            internal_api_yaml(upstream, api_extra)
        })
        .await
    }

    /// Starts everything with the resources (and any other keys) `resources` writes for the
    /// internal API, and waits for the tunnel.
    pub async fn start_with(resources: impl FnOnce(&crate::upstream::Upstream) -> String) -> Rig {
        Self::start_full(crate::Backend::Sqlite, &[], resources).await
    }

    /// [`Rig::start`] (the standard internal API), with extra `cloud serve` arguments.
    pub async fn start_with_cloud_args(cloud_args: &[&str]) -> Rig {
        Self::start_full(crate::Backend::Sqlite, cloud_args, |upstream| {
            internal_api_yaml(upstream, "")
        })
        .await
    }

    /// [`Rig::start_with`] on `backend`, with extra `cloud serve` arguments.
    pub async fn start_full(
        backend: crate::Backend,
        cloud_args: &[&str],
        resources: impl FnOnce(&crate::upstream::Upstream) -> String,
    ) -> Rig {
        let cloud = Cloud::start_with(backend, cloud_args);
        let tenant = cloud.tenant("acme");
        let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
        let upstream = crate::upstream::Upstream::start().await;
        let yaml = yaml_for(&cloud, "dc1", &resources(&upstream));
        let bridge = start_connected(&yaml, &token).await;
        let rig = Rig {
            cloud,
            tenant,
            token,
            upstream,
            bridge,
        };
        rig.wait_listed(1).await;
        rig
    }

    /// Starts one more instance of the same bridge, and waits until the cloud lists it.
    pub async fn another_instance(&self) -> BridgeProc {
        let before = self.instances_listed().await;
        let yaml = yaml_for(&self.cloud, "dc1", &internal_api_yaml(&self.upstream, ""));
        let bridge = start_connected(&yaml, &self.token).await;
        self.wait_listed(before + 1).await;
        bridge
    }

    /// How many instances of dc1 `GET /v1/bridges` lists.
    async fn instances_listed(&self) -> usize {
        let list = self
            .cloud
            .get_json(&self.tenant.api_key, "/v1/bridges")
            .await;
        list["bridges"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["name"] == "dc1")
            .filter_map(|b| b["instances"].as_array())
            .map(Vec::len)
            .sum()
    }

    /// Waits until the cloud lists `n` instances of dc1: a bridge says it is connected when
    /// the cloud has answered its upgrade, a moment before the cloud has registered its tunnel.
    pub async fn wait_listed(&self, n: usize) {
        crate::wait_until_async(
            &format!("the cloud listing {n} instance(s) of dc1"),
            || async { self.instances_listed().await == n },
        )
        .await;
    }

    /// `{cloud}/v1/bridges/dc1/apis/internal{path}`.
    pub fn api_url(&self, path: &str) -> String {
        format!("{}/v1/bridges/dc1/apis/internal{path}", self.cloud.http)
    }

    /// A GET through the tunnel with the org's API key.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET, path)
            .send()
            .await
            .expect("request")
    }

    /// A request to `{cloud}/v1/bridges/dc1/apis/internal{path}` with the org's API key, to
    /// finish (headers, body) and send.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.cloud
            .client()
            .request(method, self.api_url(path))
            .bearer_auth(&self.tenant.api_key)
    }

    /// What no HTTP client library sends (a CONNECT with a path, a broken chunked body, a
    /// transfer coding): `{method} /v1/bridges/dc1/apis/internal{path}` written by hand on the
    /// cloud's plain port with the org's API key, `more_head` (lines, each ending in CRLF),
    /// `Connection: close` and `body`; the whole answer as text.
    pub async fn raw(&self, method: &str, path: &str, more_head: &str, body: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = self.cloud.http.trim_start_matches("http://").to_string();
        let mut tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
        let request = format!(
            "{method} /v1/bridges/dc1/apis/internal{path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n{more_head}Connection: close\r\n\r\n{body}",
            self.tenant.api_key
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }
}
