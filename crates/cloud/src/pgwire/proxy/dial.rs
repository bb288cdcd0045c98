//! How `db-proxy` reaches the cloud: one HTTPS (or, to loopback, plain HTTP) connection per
//! session, upgraded to the PostgreSQL byte stream, with the API key.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::super::UPGRADE;
use super::{ProxyError, ProxyOptions};

/// How long reaching the cloud (TCP, TLS, the upgrade) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);

/// How to reach the cloud's upgrade route.
pub(super) struct Dialer {
    host: String,
    port: u16,
    tls: Option<tokio_rustls::TlsConnector>,
    path: String,
    authorization: String,
}

pub(super) fn dialer(
    opts: &ProxyOptions,
    roots: rustls::RootCertStore,
) -> Result<Dialer, ProxyError> {
    let url = &opts.api_url;
    let host = url
        .host_str()
        .ok_or_else(|| ProxyError::Url(url.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| ProxyError::Url(url.to_string()))?;
    let tls = match url.scheme() {
        "https" => {
            let mut config = rustls::ClientConfig::builder_with_provider(tunnel::tls::provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| ProxyError::Url(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        }
        // The API key would cross the network in clear: plain HTTP only to this machine.
        "http" if is_loopback_host(&host) => None,
        _ => return Err(ProxyError::Url(url.to_string())),
    };
    let base = url.path().trim_end_matches('/');
    let dialer = Dialer {
        host,
        port,
        tls,
        path: format!(
            "{base}/v1/bridges/{}/databases/{}",
            opts.bridge, opts.database
        ),
        authorization: format!("Bearer {}", opts.api_key.as_deref().unwrap_or_default()),
    };
    // The caller checked the names (their alphabet is a URL path segment's) and the key.
    Ok(dialer)
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why the cloud could not be asked.
pub(super) enum Unreached {
    /// The cloud's certificate is not vouched for (most often: `--ca-file` is not the
    /// cloud's CA).
    Tls(String),
    /// DNS, TCP or HTTP failed.
    Other(String),
}

impl Dialer {
    /// The upgraded connection, or the SQLSTATE and message to give the client.
    pub(super) async fn open(&self) -> Result<TokioIo<Upgraded>, (&'static str, String)> {
        tokio::time::timeout(DIAL_TIMEOUT, self.open_inner())
            .await
            .map_err(|_| {
                (
                    "08001",
                    format!(
                        "the cloud at {}:{} did not answer within {} s",
                        self.host,
                        self.port,
                        DIAL_TIMEOUT.as_secs()
                    ),
                )
            })?
    }

    async fn open_inner(&self) -> Result<TokioIo<Upgraded>, (&'static str, String)> {
        let unreachable = |e: String| {
            (
                "08001",
                format!("cannot reach the cloud at {}:{}: {e}", self.host, self.port),
            )
        };
        let request = self.request(&self.path, true).map_err(unreachable)?;
        let response = self.exchange(request).await.map_err(|e| match e {
            Unreached::Tls(e) => unreachable(format!("TLS: {e} (is --ca-file the cloud's CA?)")),
            Unreached::Other(e) => unreachable(e),
        })?;
        let status = response.status().as_u16();
        if status == 101 {
            return hyper::upgrade::on(response)
                .await
                .map(TokioIo::new)
                .map_err(|e| unreachable(e.to_string()));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let detail = crate::problem::detail_of(&body);
        Err(match status {
            401 => (
                "28P01",
                format!("the cloud refused CLOUD_API_KEY: {detail}"),
            ),
            404 => ("3D000", detail),
            _ => ("08001", format!("the cloud answered {status}: {detail}")),
        })
    }

    /// `GET path` with the API key; with `upgrade`, asking for the PostgreSQL upgrade.
    pub(super) fn request(
        &self,
        path: &str,
        upgrade: bool,
    ) -> Result<hyper::Request<Empty<bytes::Bytes>>, String> {
        let mut request = hyper::Request::get(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::AUTHORIZATION, &self.authorization);
        if upgrade {
            request = request
                .header(hyper::header::CONNECTION, "upgrade")
                .header(hyper::header::UPGRADE, UPGRADE);
        }
        request.body(Empty::new()).map_err(|e| e.to_string())
    }

    /// Sends `request` to the cloud on a new connection.
    pub(super) async fn exchange(
        &self,
        request: hyper::Request<Empty<bytes::Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Unreached> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| Unreached::Other(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| Unreached::Other(e.to_string()))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| {
                    let certificate = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)));
                    if certificate {
                        Unreached::Tls(e.to_string())
                    } else {
                        Unreached::Other(format!("TLS: {e}"))
                    }
                })?;
                send(TokioIo::new(stream), request).await
            }
            None => send(TokioIo::new(tcp), request).await,
        }
        .map_err(Unreached::Other)
    }
}

/// Sends `request` on a new HTTP/1.1 connection that may be upgraded.
async fn send<T>(
    io: T,
    request: hyper::Request<Empty<bytes::Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}
