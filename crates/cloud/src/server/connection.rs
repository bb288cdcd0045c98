//! One listener's accept loop and each connection's life: TLS (or PostgreSQL on the same port),
//! HTTP/1.1 or HTTP/2 with their time-outs, an idle HTTP/2 connection closed, and at shutdown
//! a graceful close that lets in-flight requests finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::LazyConfigAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::pgwire::PgFront;
use crate::relay::connect::{ClientCert, PeerAddr};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 flow-control windows for callers: a stream may have 1 MiB in flight, a connection
/// sixteen times that. A request whose handler does not read its body yet (an upload held back
/// by a busy bridge, a signal batch waiting for its share of `--ingest-memory-mb`) keeps what
/// its stream received in the connection's window; with room for sixteen such streams, the
/// others on the connection still receive theirs (at four streams' worth, six 1 MiB batches
/// sent at once on one connection stalled each other until they timed out).
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 * STREAM_WINDOW;

/// Largest HTTP/1.1 read buffer of a connection (and so the longest request head). hyper's
/// default lets each connection's buffer grow to 400 KiB and keep what it grew to: with a
/// thousand clients sending batches that was 80 MB held by idle connections. Bodies stream
/// through it in pieces of at most this size.
const HTTP1_MAX_BUFFER: usize = 16 * 1024;

/// The per-connection HTTP settings: without a timer hyper enforces no header time-out at all,
/// and a client sending a byte a minute would hold its connection forever.
fn http_builder(header_read_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(HTTP1_MAX_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// What one connection has done, so that an idle HTTP/2 connection can be closed (its client
/// answering pings would otherwise keep it forever). HTTP/1.1 is left to hyper, whose
/// keep-alive timer starts when the last response has gone out.
#[derive(Default)]
struct Activity {
    requests: AtomicU64,
    http2: AtomicBool,
}

impl Activity {
    fn request(&self, version: axum::http::Version) {
        if version == axum::http::Version::HTTP_2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Resolves once a whole `period` has passed without a new request on an HTTP/2
    /// connection, or on a connection that has never sent one. In-flight HTTP/2 streams do
    /// not count: the graceful close (GOAWAY) lets them finish.
    async fn idle(&self, period: Duration) {
        let mut seen = self.requests.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(period).await;
            let now = self.requests.load(Ordering::Relaxed);
            if now == seen && (now == 0 || self.http2.load(Ordering::Relaxed)) {
                return;
            }
            seen = now;
        }
    }
}

/// Serves one connection to its end, closing it gracefully (in-flight requests finish, and a
/// streaming answer streams on) at shutdown or once [`Activity::idle`].
async fn drive<C: GracefulConnection>(
    conn: C,
    activity: &Activity,
    stop: &CancellationToken,
    idle: Duration,
) {
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stop.cancelled() => {}
        () = activity.idle(idle) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Serves HTTP/1.1 or HTTP/2 on one connection, plain or after TLS (`http`: the settings, the
/// shutdown token and the idle time-out): each request carries the peer's address and, over
/// mutual TLS, the client's certificate, for the handlers that check them.
async fn serve_http<I>(
    io: I,
    app: Router,
    peer: SocketAddr,
    client_cert: Option<ClientCert>,
    http: (&auto::Builder<TokioExecutor>, &CancellationToken, Duration),
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (builder, stop, idle) = http;
    let activity = Arc::new(Activity::default());
    let counted = activity.clone();
    let service = TowerToHyperService::new(app.map_request(
        move |mut req: axum::http::Request<hyper::body::Incoming>| {
            counted.request(req.version());
            if let Some(cert) = &client_cert {
                req.extensions_mut().insert(cert.clone());
            }
            req.extensions_mut().insert(PeerAddr(peer));
            req
        },
    ));
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    drive(conn, &activity, stop, idle).await;
}

/// The TLS port's two configs, chosen by the client's hello: PostgreSQL's direct TLS (ALPN
/// `postgresql`) gets `postgres`, which asks for no client certificate; the rest `main`.
#[derive(Clone)]
pub(super) struct TlsConfigs {
    pub main: Arc<rustls::ServerConfig>,
    pub postgres: Arc<rustls::ServerConfig>,
}

/// Accepts on `listener` (at most `cap` connections at once) and serves each connection until
/// `stop`; then waits up to the drain time-out for the connections to finish: `false` when
/// some were still open then (and were cut).
pub(super) async fn serve_loop(
    listener: TcpListener,
    tls: Option<(TlsConfigs, Arc<PgFront>)>,
    app: Router,
    stop: CancellationToken,
    timeouts: (Duration, Duration),
    cap: usize,
) -> bool {
    let (drain_timeout, header_read_timeout) = timeouts;
    let connections = TaskTracker::new();
    let builder = Arc::new(http_builder(header_read_timeout));
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    tracing::warn!(cause = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let stop = stop.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _slot = slot;
            let http = (&*builder, &stop, header_read_timeout);
            match tls {
                None => {
                    // A PostgreSQL client on the plain port is told where to go, where an HTTP
                    // 400 would reach psql as "invalid response to SSL negotiation: H".
                    // A shutdown closes a connection that has sent nothing yet, as hyper does.
                    let mut first = [0u8; 1];
                    let peeked = tokio::select! {
                        peeked = tokio::time::timeout(header_read_timeout, stream.peek(&mut first)) => peeked,
                        () = stop.cancelled() => return,
                    };
                    match peeked {
                        Ok(Ok(1)) if PgFront::starts_postgres(first[0]) => {
                            refuse_postgres_on_plain(stream, &stop).await;
                        }
                        Ok(Ok(1)) => serve_http(stream, app, peer, None, http).await,
                        _ => {}
                    }
                }
                Some((configs, pg)) => {
                    // PostgreSQL shares the port: its packets start with a zero byte. A
                    // shutdown closes a connection that has not finished its handshake.
                    let mut first = [0u8; 1];
                    let peeked = tokio::select! {
                        peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)) => peeked,
                        () = stop.cancelled() => return,
                    };
                    match peeked {
                        Ok(Ok(1)) if PgFront::starts_postgres(first[0]) => {
                            pg.serve_plain(stream, peer).await;
                            return;
                        }
                        Ok(Ok(1)) if first[0].is_ascii_uppercase() => {
                            refuse_plain_http(stream).await;
                            return;
                        }
                        Ok(Ok(1)) => {}
                        _ => return,
                    }
                    let handshake = async {
                        let hello =
                            LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream)
                                .await?;
                        let postgres_asked = hello
                            .client_hello()
                            .alpn()
                            .is_some_and(|mut offered| offered.any(|p| p == crate::pgwire::ALPN));
                        let config = if postgres_asked {
                            configs.postgres
                        } else {
                            configs.main
                        };
                        hello.into_stream(config).await
                    };
                    let handshake = tokio::select! {
                        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake) => done,
                        () = stop.cancelled() => return,
                    };
                    let stream = match handshake {
                        Ok(Ok(s)) => s,
                        Ok(Err(err)) => {
                            tracing::debug!(peer = %peer, cause = %err, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    if stream.get_ref().1.alpn_protocol() == Some(crate::pgwire::ALPN) {
                        pg.serve_tls(stream, peer).await;
                        return;
                    }
                    let client_cert = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .map(|leaf| ClientCert(leaf.clone().into_owned()));
                    serve_http(stream, app, peer, client_cert, http).await;
                }
            }
        });
    }
    drop(listener);
    connections.close();
    let drained = tokio::time::timeout(drain_timeout, connections.wait())
        .await
        .is_ok();
    if !drained {
        tracing::warn!(timeout = ?drain_timeout, "drain timed out; closing remaining connections");
    }
    drained
}

/// Answers a plain HTTP request on the TLS port (its first byte is a method's letter where a
/// TLS handshake starts with 22): a `400` saying to use `https://`, where a TLS alert would
/// reach the client as unreadable bytes ("Received HTTP/0.9").
async fn refuse_plain_http(stream: TcpStream) {
    let body =
        "this port speaks TLS (HTTPS): use https://, or the plain HTTP port of --http-listen\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    answer_and_close(stream, answer.as_bytes()).await;
}

/// Answers a PostgreSQL client on the plain HTTP port with an `ErrorResponse` saying to use
/// the TLS port of `--listen`. libpq prints no message that answers its `SSLRequest`, so that is declined (`N`, as
/// is a `GSSENCRequest`): with `sslmode=prefer` or `disable` its startup message follows and
/// gets the message; with `require` or `verify-full` libpq says the server has no SSL.
async fn refuse_postgres_on_plain(mut stream: TcpStream, stop: &CancellationToken) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let negotiate = async {
        for _ in 0..2 {
            let mut head = [0u8; 8];
            stream.read_exact(&mut head).await?;
            let code = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            if ![
                tunnel::postgres::SSL_REQUEST,
                tunnel::postgres::GSSENC_REQUEST,
            ]
            .contains(&code)
            {
                break;
            }
            stream.write_all(b"N").await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let negotiated = tokio::select! {
        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, negotiate) => matches!(done, Ok(Ok(()))),
        () = stop.cancelled() => false,
    };
    if !negotiated {
        return;
    }
    let answer = tunnel::postgres::error_response(
        "08P01",
        "this port (--http-listen) speaks plain HTTP only: PostgreSQL clients connect to the TLS port of --listen, with sslmode=verify-full",
    );
    answer_and_close(stream, &answer).await;
}

/// Reads what the client sent, writes `answer`, and reads on until the client closes (at most
/// a second): a socket closed with unread bytes is reset, and the reset can overtake the answer.
async fn answer_and_close(mut stream: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut request)).await;
    let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.write_all(answer)).await;
    let _ = stream.shutdown().await;
    let rest = async { while matches!(stream.read(&mut request).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
}
