//! Dialing the cloud: TCP (directly or through an HTTP CONNECT proxy), then TLS 1.3. Every
//! error names its layer, so an operator knows whether to look at DNS, the firewall, the proxy
//! or certificates.

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::{ProxyUrl, basic_authorization};

/// How long each layer may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest proxy response head accepted.
const MAX_PROXY_HEAD: usize = 16 * 1024;

/// Why the cloud could not be reached, by layer.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Name resolution failed.
    #[error("DNS: cannot resolve {host}: {source}. {hint}")]
    Dns {
        /// The name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
        /// Whose name it is, and what to check.
        hint: &'static str,
    },
    /// TCP connect failed.
    #[error("TCP: cannot connect to {addr}: {source}. {hint}")]
    Tcp {
        /// host:port.
        addr: String,
        /// The OS error.
        source: std::io::Error,
        /// What to check: the proxy, the way out to the cloud, or the way to a resource.
        hint: &'static str,
    },
    /// The proxy refused the CONNECT.
    #[error(
        "proxy CONNECT to {target} via {proxy} answered {status}: {reason}. {}",
        proxy_hint(*status)
    )]
    ProxyRefused {
        /// The proxy.
        proxy: String,
        /// host:port asked for.
        target: String,
        /// The proxy's status code.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// The proxy spoke nonsense or hung up.
    #[error("proxy {proxy}: {what}")]
    Proxy {
        /// The proxy.
        proxy: String,
        /// What went wrong.
        what: String,
    },
    /// TLS failed.
    #[error("TLS with {host}: {source}{hint}")]
    Tls {
        /// The server name.
        host: String,
        /// rustls's error.
        source: std::io::Error,
        /// What to try.
        hint: &'static str,
    },
    /// A step took too long.
    #[error("{step}: timed out after {STEP_TIMEOUT:?}")]
    Timeout {
        /// Which step.
        step: &'static str,
    },
}

/// What a proxy's refusal of the CONNECT asks of the operator, by its status.
fn proxy_hint(status: u16) -> &'static str {
    match status {
        407 => {
            "The proxy wants credentials, or refused these: check the user and password in proxy_url (or HTTPS_PROXY)"
        }
        501 => "The proxy does not support CONNECT: use one that does (tinyproxy, squid)",
        500..=599 => {
            "The proxy could not reach the cloud: check that the cloud is up at api_url and that the proxy may connect to it"
        }
        _ => {
            "Check that the proxy allows CONNECT to that host and port, and proxy_url's credentials"
        }
    }
}

/// What to check when the proxy itself cannot be reached.
const PROXY_UNREACHABLE: &str = "That is the proxy (proxy_url, or HTTPS_PROXY/https_proxy when proxy_url is unset): check that it runs and that this host may connect to it";
/// What to check when the proxy's name does not resolve.
const PROXY_UNRESOLVED: &str = "That is the proxy's name (proxy_url, or HTTPS_PROXY/https_proxy when proxy_url is unset): check it and this host's resolver";
/// What to check when the cloud cannot be reached directly.
const CLOUD_UNREACHABLE: &str = "Check that this host may connect out to that address and port (a firewall; where outbound traffic must go through a proxy, set proxy_url, and check that no_proxy does not name this host)";
/// What to check when an internal resource cannot be reached.
const RESOURCE_UNREACHABLE: &str =
    "Check that the resource runs there and that this host may connect to it (a firewall)";

async fn step<T>(name: &'static str, f: impl Future<Output = T>) -> Result<T, DialError> {
    tokio::time::timeout(STEP_TIMEOUT, f)
        .await
        .map_err(|_| DialError::Timeout { step: name })
}

/// Opens a TCP connection to the cloud at `host:port`, through `proxy` when given.
pub async fn tcp(host: &str, port: u16, proxy: Option<&ProxyUrl>) -> Result<TcpStream, DialError> {
    let hint = match proxy {
        Some(_) => PROXY_UNREACHABLE,
        None => CLOUD_UNREACHABLE,
    };
    connect(host, port, proxy, hint).await
}

/// Opens a TCP connection to an internal resource (never through the proxy).
pub async fn tcp_to_resource(host: &str, port: u16) -> Result<TcpStream, DialError> {
    connect(host, port, None, RESOURCE_UNREACHABLE).await
}

/// A URL's host as a resolver and a TLS server name take it: an IPv6 literal without the
/// brackets a URL (and a proxy's CONNECT target, which keeps them) writes around it.
fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

async fn connect(
    host: &str,
    port: u16,
    proxy: Option<&ProxyUrl>,
    hint: &'static str,
) -> Result<TcpStream, DialError> {
    let (dial_host, dial_port) = match proxy {
        Some(p) => (p.host().to_string(), p.port()),
        None => (host.to_string(), port),
    };
    let addrs: Vec<_> = step(
        "DNS",
        tokio::net::lookup_host((unbracketed(&dial_host), dial_port)),
    )
    .await?
    .map_err(|source| DialError::Dns {
        host: dial_host.clone(),
        source,
        hint: match proxy {
            Some(_) => PROXY_UNRESOLVED,
            None => "Check the host name and the resolver",
        },
    })?
    .collect();
    // The step's time shared between the addresses (3 s each at least): a dial inside an
    // enrollment's 30 s still reaches the last address.
    let each = (STEP_TIMEOUT / addrs.len().max(1) as u32).max(Duration::from_secs(3));
    let stream = first_reachable(addrs, each).await;
    let stream = stream.map_err(|last| {
        let (addr, source) = match last {
            // The address tried last, when the name is not that address already.
            Some((addr, e)) if addr.ip().to_string() != unbracketed(&dial_host) => {
                (format!("{dial_host}:{dial_port} ({})", addr.ip()), e)
            }
            Some((_, e)) => (format!("{dial_host}:{dial_port}"), e),
            None => (
                format!("{dial_host}:{dial_port}"),
                std::io::Error::other("no address"),
            ),
        };
        DialError::Tcp { addr, source, hint }
    })?;
    let _ = stream.set_nodelay(true);
    match proxy {
        None => Ok(stream),
        Some(p) => step("proxy CONNECT", connect_via(stream, p, host, port)).await?,
    }
}

/// The first of `addrs` that accepts a connection, each given `limit`: a name with an IPv6
/// address that this network silently drops still reaches its IPv4 one. `Err` holds the last
/// address tried and why it failed (`None`: no address at all).
async fn first_reachable(
    addrs: Vec<std::net::SocketAddr>,
    limit: Duration,
) -> Result<TcpStream, Option<(std::net::SocketAddr, std::io::Error)>> {
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = Some((addr, e)),
            Err(_) => {
                let why = format!("timed out after {limit:?}");
                last = Some((addr, std::io::Error::new(std::io::ErrorKind::TimedOut, why)));
            }
        }
    }
    Err(last)
}

async fn connect_via(
    mut stream: TcpStream,
    proxy: &ProxyUrl,
    host: &str,
    port: u16,
) -> Result<TcpStream, DialError> {
    let target = format!("{host}:{port}");
    let proxy_name = format!("{}:{}", proxy.host(), proxy.port());
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some((user, password)) = proxy.credentials() {
        request.push_str(&format!(
            "Proxy-Authorization: {}\r\n",
            basic_authorization(&user, &password)
        ));
    }
    request.push_str("\r\n");
    let io_err = |e: std::io::Error| DialError::Proxy {
        proxy: proxy_name.clone(),
        what: e.to_string(),
    };
    stream.write_all(request.as_bytes()).await.map_err(io_err)?;
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_PROXY_HEAD {
            return Err(DialError::Proxy {
                proxy: proxy_name,
                what: "response head too long".into(),
            });
        }
        let n = stream.read(&mut byte).await.map_err(io_err)?;
        if n == 0 {
            return Err(DialError::Proxy {
                proxy: proxy_name,
                what: "closed the connection during CONNECT".into(),
            });
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let status_line = text.lines().next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let _version = parts.next();
    let status: u16 =
        parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| DialError::Proxy {
                proxy: proxy_name.clone(),
                what: format!("not an HTTP response: {status_line:?}"),
            })?;
    if status != 200 {
        return Err(DialError::ProxyRefused {
            proxy: proxy_name,
            target,
            status,
            reason: parts.next().unwrap_or("").trim().to_string(),
        });
    }
    Ok(stream)
}

/// TLS 1.3 to the cloud at `cfg.api_url` (through the proxy, if any), with `config`: the
/// connection and its authority (`host:port`, the `Host` of what is sent over it).
pub async fn cloud(
    cfg: &crate::config::Config,
    config: Arc<ClientConfig>,
) -> Result<(TlsStream<TcpStream>, String), DialError> {
    let host = cfg.api_url.host_str().unwrap_or("localhost").to_string();
    let port = cfg.api_url.port_or_known_default().unwrap_or(443);
    let stream = tcp(&host, port, cfg.proxy_for(&host, port)).await?;
    Ok((tls(stream, &host, config).await?, format!("{host}:{port}")))
}

/// TLS 1.3 over `stream`, verifying the server as `host`.
pub async fn tls(
    stream: TcpStream,
    host: &str,
    config: Arc<ClientConfig>,
) -> Result<TlsStream<TcpStream>, DialError> {
    let name = ServerName::try_from(unbracketed(host).to_string()).map_err(|_| DialError::Tls {
        host: host.to_string(),
        source: std::io::Error::other("not a valid server name"),
        hint: "",
    })?;
    step("TLS", TlsConnector::from(config).connect(name, stream))
        .await?
        .map_err(|source| {
            let text = source.to_string();
            let hint = if text.contains("UnknownIssuer") || text.contains("invalid peer certificate") {
                ". The server certificate is not the expected one: set tls_ca_file to the cloud's CA, or a TLS-inspecting proxy may be in the path"
            } else if text.contains("protocol version") || text.contains("PeerIncompatible") {
                ". The server does not speak TLS 1.3"
            } else if text.contains("InvalidContentType") {
                ". The server answered in plain text, not TLS: api_url must name the cloud's TLS port (`cloud serve --listen`, 8443 by default), not its plain HTTP one"
            } else {
                ""
            };
            DialError::Tls { host: host.to_string(), source, hint }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address that times out (its packets dropped) does not end the dial: the next one is
    /// tried, as when a cloud's IPv6 address is unreachable from the bridge's network.
    #[tokio::test]
    async fn an_address_that_times_out_is_passed_over_for_the_next() {
        let (hole, _queued) = testkit::black_hole().await;
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addrs = vec![hole.local_addr().unwrap(), live.local_addr().unwrap()];
        let stream = first_reachable(addrs, Duration::from_millis(300))
            .await
            .expect("the second address");
        assert_eq!(stream.peer_addr().unwrap(), live.local_addr().unwrap());
        let failed = first_reachable(vec![hole.local_addr().unwrap()], Duration::from_millis(300))
            .await
            .err()
            .flatten()
            .expect("the address that timed out");
        assert_eq!(failed.0, hole.local_addr().unwrap());
        assert_eq!(failed.1.kind(), std::io::ErrorKind::TimedOut);
    }

    /// A loopback port with nothing listening on it.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn what_cannot_be_reached_is_named_with_what_to_check() {
        let port = closed_port();
        let proxy = ProxyUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let via_proxy = tcp("cloud.example", 443, Some(&proxy)).await.unwrap_err();
        assert!(
            via_proxy.to_string().contains("That is the proxy"),
            "{via_proxy}"
        );
        let direct = tcp("127.0.0.1", port, None).await.unwrap_err();
        assert!(direct.to_string().contains("set proxy_url"), "{direct}");
        let resource = tcp_to_resource("127.0.0.1", port).await.unwrap_err();
        assert!(!resource.to_string().contains("proxy"), "{resource}");
    }

    /// `api_url: https://[::1]:8443` (and a proxy at `http://[::1]:3128`): the host as the URL
    /// writes it, brackets and all, is an address, never a name to look up.
    #[tokio::test]
    async fn an_ipv6_literal_is_dialled_without_its_brackets() {
        match std::net::TcpListener::bind("[::1]:0") {
            Ok(listener) => {
                let port = listener.local_addr().unwrap().port();
                tcp("[::1]", port, None).await.unwrap();
                drop(listener);
                let proxy = ProxyUrl::parse(&format!("http://[::1]:{port}")).unwrap();
                let via = tcp("cloud.example", 443, Some(&proxy)).await.unwrap_err();
                assert!(matches!(via, DialError::Tcp { .. }), "{via}");
            }
            // A host without IPv6: the address is still read, and the connect is what fails.
            Err(_) => {
                let e = tcp("[::1]", 9, None).await.unwrap_err();
                assert!(matches!(e, DialError::Tcp { .. }), "{e}");
            }
        }
    }

    #[test]
    fn a_proxy_refusal_says_what_to_check_by_its_status() {
        let refused = |status| {
            DialError::ProxyRefused {
                proxy: "proxy:3128".into(),
                target: "cloud:443".into(),
                status,
                reason: "x".into(),
            }
            .to_string()
        };
        assert!(refused(502).contains("could not reach the cloud"));
        assert!(refused(501).contains("does not support CONNECT"));
        assert!(refused(407).contains("wants credentials"));
        assert!(refused(403).contains("allows CONNECT"));
    }
}
