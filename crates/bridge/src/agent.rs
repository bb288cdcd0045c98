//! The agent's main loop: dial out, upgrade, serve HTTP/2 to the cloud over the tunnel until it
//! drops, then back off (full jitter) and dial again — forever, until shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, Failure};
use crate::config::Config;
use crate::dial;
use crate::forward::Forwarder;
use crate::identity::{AgentError, Identity, problem_detail};
use crate::metrics::Metrics;
use crate::status::{Connection, Status};

/// How long the upgrade exchange may take once TLS is up.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long in-flight streams may take to finish at shutdown: within the 60 s that the shipped
/// systemd unit and Kubernetes manifest give a stopping bridge, with room to write the audit
/// records after it.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(50);

/// Everything the loop needs.
pub struct Agent {
    /// Configuration.
    pub cfg: Arc<Config>,
    /// Shared status (for `/health`).
    pub status: Arc<Status>,
    /// Metrics.
    pub metrics: Metrics,
    /// This process's instance id.
    pub instance: String,
    /// The stream handler.
    pub forwarder: Arc<Forwarder>,
    /// TLS identity (client certificate).
    pub identity: Arc<Identity>,
    /// Streams still in flight when the drain at shutdown ran out.
    pub cut: std::sync::atomic::AtomicI64,
}

impl Agent {
    /// Runs until `shutdown`; returns after draining the current tunnel, with the number of
    /// streams the drain cut ([`DRAIN_TIMEOUT`] ran out while they were in flight).
    pub async fn run(self, shutdown: CancellationToken) -> i64 {
        let renewer = self.spawn_renewal(shutdown.clone());
        self.reconnect_loop(&shutdown).await;
        renewer.abort();
        self.cut.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Renews an enrolled certificate at two thirds of its life, connected or not, so the next
    /// connection never presents an expired one. A failed renewal is retried with the reconnect
    /// back-off (slowly for a refused token), never at once.
    fn spawn_renewal(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let identity = self.identity.clone();
        let mut backoff = Backoff::new(self.cfg.reconnect_delay);
        tokio::spawn(async move {
            let mut retry: Option<Duration> = None;
            loop {
                let wait = retry.take().unwrap_or_else(|| {
                    identity
                        .renew_in()
                        .unwrap_or(Duration::from_secs(60))
                        .min(Duration::from_secs(3600))
                });
                tokio::select! {
                    _ = tokio::time::sleep(wait.max(Duration::from_secs(1))) => {}
                    _ = shutdown.cancelled() => return,
                }
                if !identity.renew_in().is_some_and(|d| d.is_zero()) {
                    continue;
                }
                match identity.client_config().await {
                    Ok(_) => backoff.reset(),
                    Err(e) => {
                        let failure = match e {
                            AgentError::Unauthorized(_) => Failure::Rejected,
                            _ => Failure::Transient,
                        };
                        let delay = backoff.next_delay(failure);
                        tracing::warn!(cause = %e, retry_in_ms = delay.as_millis() as u64, "client certificate renewal failed; will retry");
                        retry = Some(delay);
                    }
                }
            }
        })
    }

    async fn reconnect_loop(&self, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new(self.cfg.reconnect_delay);
        let mut ever_connected = false;
        // Set once a dropped certificate's attempt was retried at once (enrolling, with no
        // back-off and no error: the repair is expected after a cloud reinstalled or its CA
        // rotated), until a tunnel opens: a cloud that refuses every new certificate too gets
        // the usual back-off from then on, not an enrollment per attempt.
        let mut repairing = false;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            if self.status.connection() != Connection::Unauthorized {
                self.status.set(if ever_connected {
                    Connection::Reconnecting
                } else {
                    Connection::Connecting
                });
            }
            let failure = match self.session(shutdown, ever_connected).await {
                Ok((uptime, why)) => {
                    ever_connected = true;
                    repairing = false;
                    backoff.connection_ended(uptime);
                    if shutdown.is_cancelled() {
                        break;
                    }
                    tracing::warn!(uptime_s = uptime.as_secs(), cause = %why, "tunnel lost; reconnecting");
                    self.status.set(Connection::Reconnecting);
                    Failure::Transient
                }
                Err(AgentError::Unauthorized(why)) => {
                    self.identity
                        .attempt_failed(&AgentError::Unauthorized(why.clone()));
                    self.metrics.connection_errors.inc();
                    self.status.set(Connection::Unauthorized);
                    tracing::error!(reason = %why, "the cloud rejected the bridge token or its certificate (see reason): check SERVICE_BRIDGE_TOKEN (wrong, expired or revoked?), SERVICE_BRIDGE_NAME, and that no TLS-inspecting proxy strips the client certificate. Retrying slowly");
                    Failure::Rejected
                }
                // A head too large for the cloud (431) is the configuration's to fix: said as
                // such, and retried slowly, not as a network problem.
                Err(e @ AgentError::Refused { status: 431, .. }) => {
                    self.metrics.connection_errors.inc();
                    tracing::error!(cause = %e, "the cloud refused the connect request as too large; retrying slowly");
                    Failure::Rejected
                }
                Err(e) => {
                    if self.identity.attempt_failed(&e) && !repairing {
                        repairing = true;
                        tracing::info!(cause = %e, "the saved client certificate was refused; enrolling now");
                        continue;
                    }
                    self.metrics.connection_errors.inc();
                    tracing::error!(cause = %e, api_url = %self.cfg.api_url, "cannot connect to the cloud: check api_url, that the cloud is up and reachable from here, and proxy_url if this network needs a proxy; retrying");
                    Failure::Transient
                }
            };
            let delay = backoff.next_delay(failure);
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                "next connection attempt"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        self.metrics.set_connected(false);
        self.status.set(Connection::Disconnected);
    }

    /// One tunnel: connect, serve until it ends; returns how long it was up and why it ended.
    async fn session(
        &self,
        shutdown: &CancellationToken,
        reconnect: bool,
    ) -> Result<(Duration, String), AgentError> {
        // A shutdown while enrolling, dialling or upgrading ends the attempt at once: those
        // steps may each wait for their time-out (15–30 s) on a silent peer.
        let upgraded = tokio::select! {
            opened = self.open() => opened?,
            _ = shutdown.cancelled() => return Ok((Duration::ZERO, "shutdown".into())),
        };
        self.serve(upgraded, shutdown, reconnect).await
    }

    /// Enrolls if needed, dials the cloud (through the proxy, if any), and upgrades the
    /// connection into a tunnel.
    async fn open(&self) -> Result<hyper::upgrade::Upgraded, AgentError> {
        let tls = self.identity.client_config().await?;
        let (stream, authority) = dial::cloud(&self.cfg, tls).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| AgentError::Http(e.to_string()))?;
        let conn = tokio::spawn(conn.with_upgrades());
        let request = connect_request(&self.cfg, &self.instance, &authority, false)?;
        let response = exchange(&mut sender, request).await?;
        if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(refusal(response).await);
        }
        let upgraded = tokio::time::timeout(EXCHANGE_TIMEOUT, hyper::upgrade::on(response))
            .await
            .map_err(|_| AgentError::Http("the tunnel upgrade did not complete".into()))?
            .map_err(|e| AgentError::Http(format!("tunnel upgrade: {e}")))?;
        drop(conn);
        Ok(upgraded)
    }

    /// Serves the cloud's streams over an upgraded tunnel until it ends or `shutdown` drains
    /// it; returns how long it was up and why it ended.
    async fn serve(
        &self,
        upgraded: hyper::upgrade::Upgraded,
        shutdown: &CancellationToken,
        reconnect: bool,
    ) -> Result<(Duration, String), AgentError> {
        let since = Instant::now();
        if reconnect {
            self.metrics.reconnections.inc();
        }
        self.metrics.set_connected(true);
        self.status.set(Connection::Connected);
        self.identity.accepted();
        tracing::info!(api_url = %self.cfg.api_url, instance = %self.instance, "Bridge connected successfully");
        let hb = self.cfg.heartbeat_interval;
        let forwarder = self.forwarder.clone();
        let service = hyper::service::service_fn(move |req| forwarder.clone().handle(req));
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(tunnel_streams(self.cfg.max_connections))
            .initial_stream_window_size(tunnel::STREAM_WINDOW)
            .initial_connection_window_size(tunnel::CONNECTION_WINDOW)
            .max_frame_size(tunnel::MAX_FRAME)
            .max_send_buf_size(tunnel::MAX_FRAME as usize * 4)
            .max_pending_accept_reset_streams(tunnel::MAX_RESET_STREAMS)
            .max_local_error_reset_streams(tunnel::MAX_RESET_STREAMS)
            // Database sessions are extended CONNECT streams (RFC 8441).
            .enable_connect_protocol()
            .keep_alive_interval(hb)
            .keep_alive_timeout(hb * 3);
        // Frames of many streams in one write (tunnel::coalesce).
        let io = TokioIo::new(tunnel::coalesce::Coalesced::new(TokioIo::new(upgraded)));
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut watchdog = tokio::time::interval(
            hb.min(Duration::from_secs(1))
                .max(Duration::from_millis(200)),
        );
        let why = loop {
            tokio::select! {
                result = &mut connection => {
                    break match result {
                        Err(e) => crate::forward::causes(&e),
                        Ok(()) => "the cloud (or a proxy on the way) closed the connection".to_string(),
                    };
                }
                _ = watchdog.tick() => {
                    if self.status.heartbeat_age(since) > hb * 3 {
                        tracing::warn!(missed = 3, "no heartbeat from the cloud in three intervals; dropping the tunnel");
                        break "no heartbeat from the cloud in three intervals".to_string();
                    }
                }
                _ = shutdown.cancelled() => {
                    tracing::info!("shutdown: finishing in-flight streams");
                    self.status.drain();
                    self.forwarder.stop_sessions();
                    connection.as_mut().graceful_shutdown();
                    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
                    if tokio::time::timeout_at(deadline, &mut connection).await.is_err() {
                        let cut = self.metrics.in_flight.get();
                        self.cut.store(cut, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(cut_streams = cut, "drain timed out after {} s: {cut} stream(s) still in flight are cut (their audit records say \"ended\":\"cut\", or status 499 where no answer had begun)", DRAIN_TIMEOUT.as_secs());
                    }
                    if tokio::time::timeout_at(deadline, self.forwarder.sessions_ended()).await.is_err() {
                        tracing::warn!("database sessions did not end within the drain time");
                    }
                    break "shutdown".to_string();
                }
            }
        };
        self.metrics.set_connected(false);
        match self.status.take_revocation() {
            // The cloud closed it for good: a refusal, not a lost tunnel to dial again at once.
            Some(reason) if !shutdown.is_cancelled() => Err(AgentError::Unauthorized(reason)),
            _ => Ok((since.elapsed(), why)),
        }
    }
}

/// HTTP/2 streams the tunnel admits: `max_connections` forwarded at once by this instance (the
/// forwarder's semaphore), up to three times that waiting (at most [`crate::forward`]'s queue
/// wait, then 503), and one slot kept for the heartbeat so a busy tunnel is never taken for a
/// dead one.
fn tunnel_streams(max_connections: u32) -> u32 {
    max_connections.saturating_mul(4).saturating_add(1)
}

/// Why the upgrade request failed. A TLS 1.3 server checks the client's certificate after the
/// client has finished its side of the handshake, so a cloud that refuses the certificate says
/// so in an alert that ends the first read: this request's answer.
fn upgrade_failed(error: &hyper::Error) -> AgentError {
    use rustls::AlertDescription as A;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        // An `io::Error`'s `source` skips the error it wraps: look at that one too.
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::DecryptError
            | A::AccessDenied
            | A::CertificateRequired),
        )) = tls
        {
            return AgentError::CertificateRefused(format!("{alert:?}"));
        }
        next = e.source();
    }
    AgentError::Http(format!(
        "tunnel upgrade request: {}",
        crate::forward::causes(error)
    ))
}

/// The resources the connect request announces: every entry's kind and name, and each Git
/// source's `repositories` globs while the whole list stays within
/// [`tunnel::repositories::MAX_ANNOUNCED`] bytes of JSON (the cloud reads a head of 16 KiB at
/// most); a source whose globs no longer fit is announced without them, and the cloud then
/// checks no mapping's path for it (logged once per process).
pub(crate) fn announced_resources(cfg: &Config) -> Vec<tunnel::ResourceInfo> {
    let mut resources: Vec<tunnel::ResourceInfo> = cfg
        .resources()
        .into_iter()
        .map(|(kind, name)| tunnel::ResourceInfo {
            kind,
            name: name.to_string(),
            repositories: None,
        })
        .collect();
    let json_len = |r: &[tunnel::ResourceInfo]| serde_json::to_string(r).map_or(0, |j| j.len());
    let mut left_out = Vec::new();
    for i in 0..resources.len() {
        if resources[i].kind != tunnel::ResourceKind::Git {
            continue;
        }
        let globs = (cfg.sources.iter())
            .find(|s| s.name == resources[i].name)
            .map(|s| &s.repositories)
            .filter(|g| !g.is_empty());
        let Some(globs) = globs else {
            continue;
        };
        resources[i].repositories = Some(
            globs
                .iter()
                .map(|g| tunnel::repositories::encoded(g))
                .collect(),
        );
        if json_len(&resources) > tunnel::repositories::MAX_ANNOUNCED {
            resources[i].repositories = None;
            left_out.push(resources[i].name.clone());
        }
    }
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !left_out.is_empty() && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(sources = %left_out.join(", "), "these Git sources' repositories globs do not fit in the connect request and are not announced: the cloud takes any path when a repository is mapped to them (the bridge still refuses paths outside them)");
    }
    resources
}

/// `GET /v1/bridge/connect` with the bridge's token, name, instance, version, protocol,
/// heartbeat and resources; asking for the tunnel, or with `check` for the cloud's checks alone.
fn connect_request(
    cfg: &Config,
    instance: &str,
    authority: &str,
    check: bool,
) -> Result<hyper::Request<Empty<Bytes>>, AgentError> {
    let resources = announced_resources(cfg);
    let mut request = hyper::Request::get(tunnel::CONNECT_PATH)
        .header("host", authority)
        .header("authorization", format!("Bearer {}", cfg.token.expose()))
        .header(tunnel::HEADER_NAME, &cfg.name)
        .header(tunnel::HEADER_INSTANCE, instance)
        .header(tunnel::HEADER_VERSION, crate::VERSION)
        .header(
            tunnel::HEADER_PROTOCOL,
            tunnel::PROTOCOL_VERSION.to_string(),
        )
        .header(
            tunnel::HEADER_HEARTBEAT,
            cfg.heartbeat_interval.as_secs().to_string(),
        )
        .header(
            tunnel::HEADER_RESOURCES,
            serde_json::to_string(&resources).unwrap_or_default(),
        );
    request = if check {
        request.header(tunnel::HEADER_CHECK, "1")
    } else {
        request
            .header("connection", "upgrade")
            .header("upgrade", tunnel::UPGRADE_PROTOCOL)
    };
    request
        .body(Empty::<Bytes>::new())
        .map_err(|e| AgentError::Http(e.to_string()))
}

/// Sends the connect request, within [`EXCHANGE_TIMEOUT`].
async fn exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, AgentError> {
    tokio::time::timeout(EXCHANGE_TIMEOUT, sender.send_request(request))
        .await
        .map_err(|_| {
            AgentError::Http(format!(
                "the cloud did not answer the tunnel upgrade within {EXCHANGE_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| upgrade_failed(&e))
}

/// The error a refused connect stands for, with the cloud's reason.
async fn refusal(response: hyper::Response<hyper::body::Incoming>) -> AgentError {
    let status = response.status();
    let reason = response
        .headers()
        .get(tunnel::HEADER_REFUSAL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // At most 64 KiB, within the exchange time-out: a proxy or a broken peer that streams or
    // stalls a refusal must not hold the reconnect loop.
    let limited = http_body_util::Limited::new(response.into_body(), 64 * 1024);
    let body = tokio::time::timeout(EXCHANGE_TIMEOUT, http_body_util::BodyExt::collect(limited))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let reason = reason.unwrap_or_else(|| problem_detail(&body));
    let reason = if status.as_u16() == 431 && reason.trim().is_empty() {
        "the connect request's head is larger than the cloud reads (16 KiB): too many resources, or names too long; split the entries over two bridges".to_string()
    } else {
        reason
    };
    if matches!(status.as_u16(), 401 | 403) {
        AgentError::Unauthorized(reason)
    } else {
        AgentError::Refused {
            status: status.as_u16(),
            reason,
        }
    }
}

/// What `bridge check` asks of the cloud for a configured client certificate
/// (`tls_cert_file`): every check of a tunnel with that certificate, and no tunnel. A cloud of
/// an earlier release, which does not know the check, has made its checks too when it answers
/// `400 send Upgrade`: that is said as such.
pub async fn check_tunnel(cfg: &Config, identity: &Identity) -> Result<(), AgentError> {
    let (stream, authority) = dial::cloud(cfg, identity.client_config().await?).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| AgentError::Http(e.to_string()))?;
    let conn = tokio::spawn(conn);
    let instance = format!("check-{}", std::process::id());
    let request = connect_request(cfg, &instance, &authority, true)?;
    let answer = match exchange(&mut sender, request).await {
        Ok(response) if response.status() == http::StatusCode::NO_CONTENT => Ok(()),
        // The refusal's body is read before the connection goes.
        Ok(response) => Err(refusal(response).await),
        Err(e) => Err(e),
    };
    conn.abort();
    match answer {
        Err(AgentError::Refused { status: 400, reason }) if reason.starts_with("send Upgrade") => {
            Err(AgentError::Refused {
                status: 400,
                reason: "the cloud accepted the token and the certificate, but is of a release before bridge check could ask it without opening a tunnel: upgrade the cloud, or start the bridge to see the tunnel open".to_string(),
            })
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MapEnv;

    /// Each Git source's globs are announced while the list fits the cloud's head; those that
    /// no longer fit are announced without them, and the list stays within the budget.
    #[test]
    fn globs_are_announced_while_the_resource_list_fits() {
        let mut yaml = String::from("name: n\ntoken: t\nsources:\n");
        for i in 0..150 {
            yaml.push_str(&format!(
                "  - {{name: source-with-a-long-name-{i:03}, url: http://g, repositories: [\"team-{i:03}/*\", \"tëam/x\"]}}\n"
            ));
        }
        yaml.push_str("  - {name: all, url: http://g}\n");
        let cfg = Config::from_yaml(&yaml, "bridge.yaml", &MapEnv::new()).unwrap();
        let resources = announced_resources(&cfg);
        assert_eq!(resources.len(), 151);
        let json = serde_json::to_string(&resources).unwrap();
        assert!(
            json.len() <= tunnel::repositories::MAX_ANNOUNCED,
            "{}",
            json.len()
        );
        assert!(json.is_ascii(), "a header value must be ASCII");
        let announced = resources
            .iter()
            .filter(|r| r.repositories.is_some())
            .count();
        assert!(announced > 20 && announced < 150, "{announced}");
        assert_eq!(
            resources[0].repositories.as_deref(),
            Some(&["team-000/*".to_string(), "t%C3%ABam/x".to_string()][..])
        );
        assert!(
            resources[150].repositories.is_none(),
            "a source without globs"
        );
    }
}
