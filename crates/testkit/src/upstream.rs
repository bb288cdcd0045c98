//! A small internal HTTP API for the bridge tests, on an ephemeral port: it echoes what it
//! received (so tests see injected and stripped headers), streams large bodies both ways, and
//! counts concurrent requests (to check `max_connections`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest, Sha256};

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Counters the tests read.
#[derive(Default)]
pub struct Stats {
    /// Requests now being served.
    pub current: AtomicUsize,
    /// Highest `current` seen.
    pub peak: AtomicUsize,
    /// Requests served in all.
    pub total: AtomicUsize,
}

/// A running upstream.
pub struct Upstream {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// Its counters.
    pub stats: Arc<Stats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|n| match n {}).boxed()
}

fn query(req: &Request<Incoming>, key: &str) -> Option<u64> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok()).flatten()
    })
}

async fn handle(req: Request<Incoming>, stats: Arc<Stats>) -> Result<Response<Body>, Infallible> {
    let now = stats.current.fetch_add(1, Ordering::SeqCst) + 1;
    stats.peak.fetch_max(now, Ordering::SeqCst);
    stats.total.fetch_add(1, Ordering::SeqCst);
    let response = route(req).await;
    stats.current.fetch_sub(1, Ordering::SeqCst);
    Ok(response)
}

async fn route(req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path.starts_with("/protected") {
        use base64::Engine;
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("svc:{}", crate::bridge::INTERNAL_PASSWORD))
        );
        if req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some(expected.as_str())
        {
            let mut r = Response::new(full("credentials required"));
            *r.status_mut() = hyper::StatusCode::UNAUTHORIZED;
            return r;
        }
    }
    // A server up but failing, as one whose own backend is down answers.
    if path.ends_with("/failing") {
        let mut r = Response::new(full("bad gateway"));
        *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
        return r;
    }
    if let Some(ms) = query(&req, "sleep_ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(ms) = query(&req, "body_delay_ms") {
        // The head (with its Content-Length) goes at once, the body `ms` later: a response
        // that is mid-flight for a while, as a slow internal system's often is.
        let body = Bytes::from(format!("{{\"path\":\"{path}\",\"late\":true}}"));
        let len = body.len();
        let late = futures_util::stream::once(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, Infallible>(Frame::data(body))
        });
        let mut r = Response::new(StreamBody::new(late).boxed());
        r.headers_mut().insert(
            hyper::header::CONTENT_LENGTH,
            hyper::header::HeaderValue::from(len),
        );
        return r;
    }
    if path.ends_with("/redirect") || path.ends_with("/redirect-away") {
        // A redirect to this server's own address, absolute as many frameworks write it; or
        // to another host.
        let host = req
            .headers()
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let to = if path.ends_with("/redirect") {
            format!("http://{host}/target?from=redirect#top")
        } else {
            "https://sso.internal.example/login".to_string()
        };
        let mut r = Response::new(full(""));
        *r.status_mut() = hyper::StatusCode::FOUND;
        r.headers_mut()
            .insert(hyper::header::LOCATION, to.parse().unwrap());
        return r;
    }
    if path.ends_with("/download") {
        // Streams `bytes` bytes of a repeating pattern in 64 KiB chunks.
        let total = query(&req, "bytes").unwrap_or(0);
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let stream = futures_util::stream::unfold(total, move |left| {
            let chunk = chunk.clone();
            async move {
                if left == 0 {
                    return None;
                }
                let n = left.min(chunk.len() as u64) as usize;
                Some((
                    Ok::<_, Infallible>(Frame::data(chunk.slice(..n))),
                    left - n as u64,
                ))
            }
        });
        return Response::new(StreamBody::new(stream).boxed());
    }
    if path.ends_with("/ticks") {
        // A line every 100 ms, for as long as the caller reads: a live event stream.
        let stream = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            Some((
                Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"tick\n"))),
                (),
            ))
        });
        return Response::new(StreamBody::new(stream).boxed());
    }
    if path.ends_with("/stall") {
        // Sends one chunk, then nothing ever again: a hung internal system.
        let first = futures_util::stream::once(async {
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"partial ")))
        });
        let stream = futures_util::StreamExt::chain(first, futures_util::stream::pending());
        return Response::new(StreamBody::new(stream).boxed());
    }
    if path.ends_with("/upload") {
        let mut body = req.into_body();
        let mut hasher = Sha256::new();
        let mut n = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(d) = frame.data_ref() {
                n += d.len() as u64;
                hasher.update(d);
            }
        }
        let digest: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        return Response::new(full(format!("{{\"bytes\":{n},\"sha256\":\"{digest}\"}}")));
    }
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                serde_json::Value::String(v.to_str().unwrap_or("").to_string()),
            )
        })
        .collect();
    let echo = serde_json::json!({
        "method": req.method().as_str(),
        "path": path,
        "query": req.uri().query(),
        "headers": headers,
    });
    let mut response = Response::new(full(echo.to_string()));
    if query(&req, "echo_auth").is_some()
        && let Some(auth) = req.headers().get("authorization")
    {
        // A debugging endpoint that writes the request's credentials back in its headers.
        let h = response.headers_mut();
        h.insert("x-echo-auth", auth.clone());
        h.insert("x-kept", hyper::header::HeaderValue::from_static("1"));
    }
    if query(&req, "origin_headers").is_some() {
        // An HTML page with headers that a browser applies to the whole origin (here the
        // cloud's): a cookie, a proxy's challenge, HSTS, another server for the origin, a
        // wipe of the origin's data, a worker's scope, CORS that lets any site read with
        // credentials, reporting and client hints; a redirect after a delay, a password
        // prompt, and an answer any shared cache may keep.
        let h = response.headers_mut();
        for (name, value) in [
            ("set-cookie", "internal=1; Path=/"),
            ("proxy-authenticate", "Basic realm=\"internal\""),
            ("content-type", "text/html"),
            (
                "strict-transport-security",
                "max-age=31536000; includeSubDomains",
            ),
            ("alt-svc", "h2=\"127.0.0.1:1\"; ma=86400"),
            ("clear-site-data", "\"cookies\""),
            ("service-worker-allowed", "/"),
            ("access-control-allow-origin", "https://other.example"),
            ("access-control-allow-credentials", "true"),
            ("nel", r#"{"report_to":"g","max_age":86400}"#),
            (
                "report-to",
                r#"{"group":"g","max_age":86400,"endpoints":[{"url":"https://other.example/r"}]}"#,
            ),
            ("reporting-endpoints", r#"g="https://other.example/r""#),
            ("accept-ch", "Sec-CH-UA-Model"),
            ("critical-ch", "Sec-CH-UA-Model"),
            ("refresh", "0; url=https://other.example/"),
            (
                "www-authenticate",
                r#"Basic realm="Corporate SSO password""#,
            ),
            ("cache-control", "public, max-age=600"),
        ] {
            h.insert(name, hyper::header::HeaderValue::from_static(value));
        }
    }
    if let Some(kb) = query(&req, "head_kb") {
        // About `kb` KB of response head, in headers of 4,000 bytes (`x-big-0`, …).
        let value = hyper::header::HeaderValue::from_str(&"v".repeat(4000)).unwrap();
        for i in 0..kb.div_ceil(4) {
            let name = hyper::header::HeaderName::from_bytes(format!("x-big-{i}").as_bytes());
            response.headers_mut().insert(name.unwrap(), value.clone());
        }
    }
    if query(&req, "hop_header").is_some() {
        // A header this server marks as its own hop's: no intermediary may pass it on.
        let h = response.headers_mut();
        h.insert(
            "connection",
            hyper::header::HeaderValue::from_static("x-upstream-hop"),
        );
        h.insert(
            "x-upstream-hop",
            hyper::header::HeaderValue::from_static("hop-only"),
        );
        h.insert(
            "x-upstream-kept",
            hyper::header::HeaderValue::from_static("end-to-end"),
        );
    }
    response
}

impl Upstream {
    /// Starts on `127.0.0.1:0`.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// Starts on `127.0.0.1:0` over HTTPS, with a certificate for `localhost` signed by `ca`;
    /// its URL is `https://localhost:PORT`.
    pub async fn start_tls(ca: &crate::tls::TestCa) -> Self {
        Self::serve(Some(ca.server_config("localhost"))).await
    }

    async fn serve(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let url = match tls {
            Some(_) => format!("https://localhost:{}", addr.port()),
            None => format!("http://{addr}"),
        };
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let stats = Arc::new(Stats::default());
        let s = stats.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, acceptor) = (s.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(req, s.clone()));
                    let http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = match acceptor {
                        None => http.serve_connection(TokioIo::new(stream), svc).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(tls) => http.serve_connection(TokioIo::new(tls), svc).await,
                            Err(_) => return,
                        },
                    };
                });
            }
        });
        Upstream { url, stats, task }
    }
}
