//! The PostgreSQL front end on the cloud's TLS port: `psql "host=CLOUD port=8443
//! dbname={bridge}/{database} sslmode=verify-full"` reaches a database behind a bridge.
//!
//! A connection whose first byte is `0` (a PostgreSQL length) rather than `22` (a TLS record)
//! is PostgreSQL: it may ask for GSS encryption (answered `N`), must ask for TLS (`S`, then
//! the usual handshake), or is a plain `CancelRequest`. A TLS connection that negotiated ALPN
//! `postgresql` (PostgreSQL 17's direct TLS) is PostgreSQL too. Inside TLS, [`session`] asks
//! for a cleartext password, which must be an API key of the org that owns the bridge, opens
//! a database stream through the tunnel and splices bytes. The cloud never speaks this
//! protocol without TLS: the password is an API key.
//!
//! `cloud db-proxy` ([`proxy`]) reaches the same sessions over HTTPS instead, for networks
//! where only 443 leaves: `GET /v1/bridges/{bridge}/databases/{name}` with an API key and
//! `Upgrade: postgresql` ([`router`]); after `101`, the connection carries what a client
//! would send after TLS, minus the password.
//!
//! Cancel requests carry the key the cloud handed out, never the database's own: [`Cancels`]
//! maps one to the other while the session lives.

mod cancel;
pub mod proxy;
mod session;
mod splice;
pub(crate) mod upgrade;
mod waiting;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tunnel::postgres::{FirstPacket, error_response, read_first_packet};

pub use cancel::Cancels;
pub use upgrade::{UPGRADE, router};

use crate::relay::RelayState;

/// The ALPN protocol of PostgreSQL's direct TLS.
pub const ALPN: &[u8] = b"postgresql";
/// Most sessions open at once through the upgrade route (`cloud db-proxy`'s).
const UPGRADE_SESSIONS: usize = 1024;
/// Most of them one org may hold, so that one org's clients (or a client that opens sessions
/// and never starts them) leave room for the others, as the ingest budget does.
const ORG_UPGRADE_SESSIONS: usize = UPGRADE_SESSIONS / 2;
/// How long a client may take to send its startup packet, password or TLS handshake.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What sessions share, on the TLS port and on the upgrade route: the relay (tunnels, keys,
/// store) and the cancel keys handed out.
#[derive(Clone)]
pub struct PgState {
    relay: RelayState,
    cancels: Arc<Cancels>,
    /// The upgrade route's sessions, which outlive their HTTP exchange (and so the listener's
    /// connection cap): they have their own cap.
    sessions: TaskTracker,
    upgrade_slots: Arc<tokio::sync::Semaphore>,
    /// Each org's share of `upgrade_slots`.
    org_upgrade_slots: Arc<std::sync::Mutex<HashMap<i64, Arc<tokio::sync::Semaphore>>>>,
    /// Cancelled when the service shuts down: open sessions close (a session has no natural
    /// end to wait for, and the bridges' tunnels close next).
    stop: CancellationToken,
}

impl PgState {
    /// Sessions over `relay`.
    pub fn new(relay: RelayState) -> Self {
        PgState {
            relay,
            cancels: Arc::new(Cancels::default()),
            sessions: TaskTracker::new(),
            upgrade_slots: Arc::new(tokio::sync::Semaphore::new(UPGRADE_SESSIONS)),
            org_upgrade_slots: Arc::default(),
            stop: CancellationToken::new(),
        }
    }

    /// A place for one more upgrade session of `org`: one of its org's share and one of the
    /// route's, held until dropped; `None` when either is full.
    fn upgrade_slot(&self, org: i64) -> Option<UpgradeSlot> {
        let share = self
            .org_upgrade_slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(org)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(ORG_UPGRADE_SESSIONS)))
            .clone();
        let org = share.try_acquire_owned().ok()?;
        let all = self.upgrade_slots.clone().try_acquire_owned().ok()?;
        Some(UpgradeSlot {
            _org: org,
            _all: all,
        })
    }

    /// Closes every open session (at shutdown) and waits, up to `limit`, for them to end.
    pub async fn shut_down(&self, limit: Duration) {
        self.stop.cancel();
        self.sessions.close();
        let _ = tokio::time::timeout(limit, self.sessions.wait()).await;
    }
}

/// An upgrade session's place in its org's share and in the route's cap.
struct UpgradeSlot {
    _org: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

/// The TLS port's front end: [`PgState`] and the port's TLS acceptor.
pub struct PgFront {
    state: PgState,
    tls: TlsAcceptor,
}

impl PgFront {
    /// The front end over `state`, securing connections with `tls` (the TLS port's own).
    pub fn new(state: PgState, tls: TlsAcceptor) -> Arc<Self> {
        Arc::new(PgFront { state, tls })
    }

    /// Whether a connection on the TLS port that starts with `first` speaks PostgreSQL (every
    /// PostgreSQL packet starts with a length below 16 MiB, a TLS handshake with byte 22).
    pub fn starts_postgres(first: u8) -> bool {
        first == 0
    }

    /// Serves a connection that started with a PostgreSQL packet before any TLS. The whole
    /// negotiation (one declined `GSSENCRequest` at most, then `SSLRequest` and the TLS
    /// handshake, a cancel, or a refused plain startup) has [`STARTUP_TIMEOUT`] in all.
    pub async fn serve_plain(self: Arc<Self>, mut stream: TcpStream, peer: std::net::SocketAddr) {
        let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
        let mut declined_gss = false;
        loop {
            let packet = tokio::time::timeout_at(deadline, read_first_packet(&mut stream)).await;
            let packet = match packet {
                Ok(Ok(packet)) => packet,
                Ok(Err(why)) => {
                    tracing::debug!(peer = %peer, why, "unreadable PostgreSQL packet");
                    return;
                }
                Err(_) => return,
            };
            match packet {
                FirstPacket::GssEnc if declined_gss => return,
                FirstPacket::GssEnc => {
                    declined_gss = true;
                    if stream.write_all(b"N").await.is_err() {
                        return;
                    }
                }
                FirstPacket::Ssl => {
                    if stream.write_all(b"S").await.is_err() {
                        return;
                    }
                    let accepted = tokio::time::timeout_at(deadline, self.tls.accept(stream)).await;
                    match accepted {
                        Ok(Ok(tls)) => self.serve_tls(tls, peer).await,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, cause = %e, "PostgreSQL TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "PostgreSQL TLS handshake timed out")
                        }
                    }
                    return;
                }
                FirstPacket::Cancel(pid, key) => {
                    self.state
                        .cancels
                        .cancel(&self.state.relay, pid, key, None)
                        .await;
                    return;
                }
                FirstPacket::Startup { .. } => {
                    let _ = stream
                        .write_all(&error_response(
                            "08P01",
                            "this server speaks PostgreSQL only inside TLS, because the password is an API key: connect with sslmode=verify-full and sslrootcert set to the service's CA (or sslmode=require)",
                        ))
                        .await;
                    return;
                }
                FirstPacket::Other(code) => {
                    let _ = stream
                        .write_all(&error_response(
                            "08P01",
                            &format!("unsupported protocol or request code {code}; this server speaks PostgreSQL protocol 3.0"),
                        ))
                        .await;
                    return;
                }
            }
        }
    }

    /// Serves a PostgreSQL session inside TLS (after `SSLRequest`, or direct TLS).
    pub async fn serve_tls<S>(self: Arc<Self>, stream: S, peer: std::net::SocketAddr)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        // At shutdown a session still opening closes at once, saying why; a running one ends
        // itself.
        let mut stream = stream;
        let spliced = std::sync::atomic::AtomicBool::new(false);
        let stopped = tokio::select! {
            () = session::run(&self.state, &mut stream, peer, &spliced) => false,
            () = session::stopped_while_opening(&self.state.stop, &spliced) => true,
        };
        if stopped {
            session::refuse_at_shutdown(&mut stream).await;
        }
    }
}
