//! The request as the internal system gets it: which headers never pass, where credentials
//! are injected, and the HTTP(S) connector that reaches internal systems.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use http::{HeaderMap, Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use url::Url;

use super::counted::Counted;
use super::kind::Kind;

/// How long connecting to an internal system may take, TCP and TLS handshake together, before
/// the request gets a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers never passed on: those of one hop, the caller's credentials, and those with which a
/// caller could make the internal server see another method, path or client address than the
/// allow rules checked. An answer keeps its `Trailer` ([`tunnel::hop::strip_answer`]); its
/// trailer fields lose these names too.
pub(super) const HOP: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "forwarded",
    "x-forwarded",
    "x-forwarded-*",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "x-cluster-client-ip",
    "client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-original-forwarded-for",
    "x-envoy-external-address",
    "x-proxyuser-ip",
    "via",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
];

/// The connector to internal systems: HTTP or HTTPS, the whole connect bounded in time.
pub type Connector = Bounded<hyper_rustls::HttpsConnector<HttpConnector>>;

/// HTTP and HTTPS to internal systems, shared by forwarding and `bridge check`. HTTPS trusts
/// the entry's `tls_ca_file` when it has one, else the system roots. A `tls_ca_file` that
/// cannot be read (checked at start, so only if it changed since) trusts nothing: the entry's
/// requests fail rather than fall back to other roots.
pub fn https_connector(tls_ca_file: Option<&Path>) -> Connector {
    let roots = crate::ca::roots(tls_ca_file).unwrap_or_else(|e| {
        tracing::error!(cause = %e, "cannot read tls_ca_file: HTTPS to this resource will fail");
        rustls::RootCertStore::empty()
    });
    let tls = rustls::ClientConfig::builder_with_provider(tunnel::tls::provider())
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| unreachable_config());
    // An internal system that does not answer SYN must not hold a `max_connections` slot.
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Bounded {
        inner: https,
        limit: CONNECT_TIMEOUT,
    }
}

/// A connector whose connects fail after `limit`: a server that takes the TCP connection and
/// never answers the TLS hello (a wrong port, a stuck process) must not hold the caller until
/// the cloud's forward timeout, nor a `max_connections` slot.
#[derive(Clone)]
pub struct Bounded<C> {
    inner: C,
    limit: Duration,
}

impl<C> tower::Service<http::Uri> for Bounded<C>
where
    C: tower::Service<http::Uri>,
    C::Error: Into<tower::BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = tower::BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<C::Response, tower::BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    /// Plain HTTP keeps the TCP connector's own timeout and words; HTTPS is bounded whole.
    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let connect = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            if !tls {
                return connect.await.map_err(Into::into);
            }
            match tokio::time::timeout(limit, connect).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no TLS session within {} s: connecting or the TLS handshake timed out",
                        limit.as_secs()
                    ),
                )
                .into()),
            }
        })
    }
}

fn unreachable_config() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(tunnel::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 is supported by ring")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// Removes the headers named in `names` (lowercase) and those the message's `Connection`
/// header lists.
pub(super) fn strip_headers(headers: &mut HeaderMap, names: &[&str]) {
    tunnel::hop::strip(headers, names);
}

/// The request as the internal system gets it: the entry's base URL plus `rest` and the
/// query, HTTP/1.1, without [`HOP`] headers or the cloud's org id, with `x-request-id` and
/// `x-bridge-principal` (who asked), and with the kind's credentials.
pub(super) fn build_upstream(
    kind: &dyn Kind,
    rest: &str,
    req: Request<Incoming>,
    counter: Arc<AtomicU64>,
) -> Result<Request<Counted<Arc<AtomicU64>>>, String> {
    let base = kind.base_url().as_str().trim_end_matches('/');
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let uri: http::Uri = format!("{base}{rest}{query}")
        .parse()
        .map_err(|e| format!("cannot build the upstream URL: {e}"))?;
    let (mut parts, body) = req.into_parts();
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    strip_headers(&mut parts.headers, HOP);
    // Who asked (the API key id) and the request id stay: an internal system may log them
    // beside its own records. The org's numeric id means nothing outside the cloud.
    strip_headers(
        &mut parts.headers,
        &[tunnel::HEADER_ORG, tunnel::HEADER_METHOD],
    );
    kind.upstream_request_filter(&mut parts.headers);
    Ok(Request::from_parts(
        parts,
        Counted {
            inner: body,
            tally: counter,
        },
    ))
}

/// A `Location` an internal system answered, as the path (and query) under its entry's `url`:
/// `/items/7?x=1` for `http://api.internal/v1/items/7?x=1` when the entry's `url` is
/// `http://api.internal/v1`. The cloud prefixes the kind's route to it, so the caller follows
/// the redirect through the tunnel and never sees the internal address. `None` for a
/// `Location` on another scheme, host or port, outside the base path, or relative to the
/// request (`items/7`, which is right through the cloud as it is).
pub(super) fn path_under(base: &Url, location: &str) -> Option<String> {
    let url = match Url::parse(location) {
        Ok(absolute) => absolute,
        Err(_) if location.starts_with('/') => base.join(location).ok()?,
        Err(_) => return None,
    };
    let origin = |u: &Url| {
        (
            u.scheme().to_string(),
            u.host_str().map(str::to_string),
            u.port_or_known_default(),
        )
    };
    if origin(&url) != origin(base) {
        return None;
    }
    let rest = url.path().strip_prefix(base.path().trim_end_matches('/'))?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    Some(match url.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_string(),
    })
}

/// Why an internal system's answer cannot go back through the tunnel, if it cannot: a `1xx`
/// as the final answer (the bridge asked for no protocol switch; HTTP/2 cannot carry a `101`),
/// or a head over [`tunnel::MAX_RESPONSE_HEAD`] as HTTP/2 counts it. Sent as it is, either
/// broke the stream, which the cloud took for a failed tunnel (and retried elsewhere).
pub(super) fn unforwardable(name: &str, status: StatusCode, headers: &HeaderMap) -> Option<String> {
    if status.is_informational() {
        return Some(format!(
            "resource {name:?} answered {status} although no protocol switch was asked for; only final answers are forwarded"
        ));
    }
    let head: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum();
    (head > tunnel::MAX_RESPONSE_HEAD as usize).then(|| {
        format!(
            "resource {name:?} answered with a head of {head} bytes (names and values plus 32 per header, as HTTP/2 counts them), more than the tunnel carries ({} bytes); its answer was not forwarded",
            tunnel::MAX_RESPONSE_HEAD
        )
    })
}

/// Why an answer framed with a transfer coding other than `chunked` cannot be forwarded
/// ([`tunnel::hop::coded_transfer`]).
pub(super) fn coded_transfer(name: &str, headers: &HeaderMap) -> Option<String> {
    tunnel::hop::coded_transfer(headers).map(|codings| {
        format!(
            "resource {name:?} answered with Transfer-Encoding: {codings}, a coding the tunnel cannot pass on (only chunked framing is); its server should send Content-Encoding instead"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn informational_answers_and_oversized_heads_are_not_forwarded() {
        let mut headers = HeaderMap::new();
        headers.insert("x-small", "1".parse().unwrap());
        assert_eq!(unforwardable("a", StatusCode::OK, &headers), None);
        let switch = unforwardable("a", StatusCode::SWITCHING_PROTOCOLS, &headers).unwrap();
        assert!(switch.contains("101 Switching Protocols"), "{switch}");
        let value: http::HeaderValue = "v".repeat(4000).parse().unwrap();
        for i in 0..70 {
            headers.insert(
                http::HeaderName::from_bytes(format!("x-big-{i}").as_bytes()).unwrap(),
                value.clone(),
            );
        }
        let big = unforwardable("a", StatusCode::OK, &headers).unwrap();
        assert!(
            big.contains("more than the tunnel carries (262144 bytes)"),
            "{big}"
        );
    }

    #[test]
    fn locations_on_the_entry_become_paths_under_it_and_others_none() {
        let base: Url = "http://api.internal:8080/v1".parse().unwrap();
        let at = |l| path_under(&base, l);
        assert_eq!(
            at("http://API.internal:8080/v1/items/7?x=1").as_deref(),
            Some("/items/7?x=1")
        );
        assert_eq!(at("/v1/items").as_deref(), Some("/items"));
        assert_eq!(at("/v1").as_deref(), Some(""));
        assert_eq!(at("items"), None);
        // Elsewhere: another host or port, another scheme, outside the base path.
        assert_eq!(at("http://sso.internal/login"), None);
        assert_eq!(at("http://api.internal:9090/v1/items"), None);
        assert_eq!(at("https://api.internal:8080/v1/items"), None);
        assert_eq!(at("/v1x/items"), None);
        assert_eq!(at("/login"), None);
        // A server root keeps the whole path; the default port may be named or not.
        let root: Url = "https://reg.internal".parse().unwrap();
        assert_eq!(
            path_under(&root, "https://reg.internal:443/v2/a?n=1").as_deref(),
            Some("/v2/a?n=1")
        );
    }
}
