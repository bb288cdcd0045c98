//! Database sessions: the one kind that is a byte stream, not HTTP. The cloud opens an
//! extended CONNECT (`:protocol postgresql`) on `/databases/{name}/`; the bridge admits it like
//! any stream (memory, `max_connections`), answers `200`, then on the upgraded stream reads
//! the client's startup message, logs in to the database with the entry's credentials
//! ([`crate::postgres`]), and splices bytes both ways. A login that fails becomes the
//! `ErrorResponse` the client reads. Every session writes a `session_start` and a
//! `session_end` audit record, and with `audit_statements` one `statement` record per simple
//! query, `Parse` or function call. At the bridge's shutdown, open sessions are cut (their
//! record says `bridge shutdown`). `/databases/{name}/cancel` carries a `CancelRequest` instead.

mod frames;
mod masking;
mod settings;
mod splice;
mod statements;

pub use masking::audited;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;
use tunnel::postgres::{FirstPacket, error_response, read_first_packet};

use super::{Forwarder, ResBody, kind};
use crate::audit::{AuditRecord, Decision};
use crate::config::Database;
use crate::postgres;
use splice::splice;

/// How long the bridge tries to cancel a session's statement at shutdown.
const SHUTDOWN_CANCEL: std::time::Duration = std::time::Duration::from_secs(2);
/// How long the cloud has to send the startup message (or cancel) of a stream.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Counts a database stream in `bridge_streams_in_flight` for as long as it lives.
struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl InFlight {
    fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One declared database, with its own `max_connections`.
pub(super) struct DatabaseEntry {
    pub db: Database,
    pub slots: Option<Arc<Semaphore>>,
}

impl Forwarder {
    /// Admits a database stream and, once upgraded, runs its session in its own task.
    pub(super) async fn database(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        started: Instant,
        mut audit: AuditRecord,
        rest: &str,
    ) -> Response<ResBody> {
        let Some(entry) = self.databases.get(&audit.resource).cloned() else {
            let refusal =
                kind::Refusal::not_found("not_declared", "this bridge declares no such database");
            return self.deny(started, audit, None, refusal);
        };
        let protocol = req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .map(|p| p.as_str().to_owned());
        if req.method() != Method::CONNECT || protocol.as_deref() != Some(tunnel::DATABASE_PROTOCOL)
        {
            let refusal = kind::Refusal {
                status: StatusCode::METHOD_NOT_ALLOWED,
                reason: "not_allowed",
                rule: "database-stream".into(),
                why: "a database is reached as a PostgreSQL stream (extended CONNECT, :protocol postgresql), never as HTTP".into(),
            };
            return self.deny(started, audit, None, refusal);
        }
        let cancel = match rest.trim_end_matches('/') {
            "" => false,
            r if r == format!("/{}", tunnel::DATABASE_CANCEL) => true,
            _ => {
                let refusal = kind::Refusal::not_found(
                    "not_declared",
                    "a database stream's path is /databases/{name}/ or /databases/{name}/cancel",
                );
                return self.deny(started, audit, None, refusal);
            }
        };
        if self.stop.is_cancelled() {
            let refusal = kind::Refusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                reason: "overloaded",
                rule: "shutdown".into(),
                why: "the bridge is shutting down; another instance, or this one once restarted, will take the session".into(),
            };
            return self.deny(started, audit, None, refusal);
        }
        // A cancel takes no slot: it is most needed when every slot is busy. A caller that
        // leaves while the session waits for one is recorded by `Admitting`.
        let permits = if cancel {
            None
        } else {
            let admitting = super::settle::Admitting::new(&self, audit, started);
            let admitted = self.admit_stream(entry.slots.as_ref()).await;
            audit = admitting.decided();
            match admitted {
                Ok(permits) => Some(permits),
                Err(refusal) => return self.deny(started, audit, None, refusal),
            }
        };
        audit.rule = if cancel {
            "database-cancel".into()
        } else {
            "database-session".into()
        };
        audit.decision = Decision::Allowed;
        audit.status = 200;
        let upgrade = hyper::upgrade::on(&mut req);
        let forwarder = self.clone();
        self.sessions.spawn(async move {
            let _in_flight = InFlight::new(&forwarder.metrics.in_flight);
            let io = match upgrade.await {
                Ok(io) => TokioIo::new(io),
                Err(e) => {
                    tracing::warn!(cause = %e, "database stream never opened");
                    forwarder.end(audit, started, (0, 0), format!("stream never opened: {e}"));
                    return;
                }
            };
            if cancel {
                forwarder.cancel(io, &entry, audit, started).await;
            } else {
                forwarder.session(io, &entry, audit, started).await;
            }
            drop(permits);
        });
        Response::new(
            http_body_util::Empty::new()
                .map_err(|never: std::convert::Infallible| match never {})
                .boxed(),
        )
    }

    /// A session: startup, login, then bytes both ways until either side ends.
    async fn session<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut client: S,
        entry: &DatabaseEntry,
        mut audit: AuditRecord,
        started: Instant,
    ) {
        let first = tokio::select! {
            first = tokio::time::timeout(STARTUP_TIMEOUT, read_first_packet(&mut client)) => {
                first.unwrap_or_else(|_| Err("no startup message within 30 s".into()))
            }
            () = self.stop.cancelled() => Err("bridge shutdown".into()),
        };
        let params = match first {
            Ok(FirstPacket::Startup { params, .. }) => params,
            Ok(other) => {
                self.end(
                    audit,
                    started,
                    (0, 0),
                    format!("startup: expected a startup message, got {other:?}"),
                );
                return;
            }
            Err(why) => {
                self.end(audit, started, (0, 0), format!("startup: {why}"));
                return;
            }
        };
        let name = audit.resource.clone();
        let login = tokio::select! {
            login = postgres::login(&entry.db, &params) => Some(login),
            () = self.stop.cancelled() => None,
        };
        let Some(login) = login else {
            self.end(audit, started, (0, 0), "bridge shutdown".into());
            return;
        };
        let session = match login {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(resource = %name, step = e.step(), cause = %e, "database login failed");
                // A refused login is a credential to fix, as an API's or registry's 401 is.
                match e {
                    postgres::LoginError::Auth { .. } => self.metrics.refuse("upstream_auth"),
                    postgres::LoginError::Dns { .. } | postgres::LoginError::Tcp { .. } => {
                        self.metrics.refuse("upstream_unavailable");
                    }
                    _ => {}
                }
                // The client reads the step and the server's own words; internal host names,
                // addresses and socket errors stay in the bridge's log.
                let public = e.public();
                let more = if public.contains("the bridge's log") {
                    ""
                } else {
                    "; the bridge's log has the details"
                };
                let message = format!("the bridge cannot open database {name:?}: {public}{more}");
                let _ = client
                    .write_all(&error_response(e.sqlstate(), &message))
                    .await;
                let _ = client.shutdown().await;
                audit.status = 502;
                self.end(
                    audit,
                    started,
                    (0, 0),
                    format!("login failed at {}", e.step()),
                );
                return;
            }
        };
        let mut start = audit.clone();
        start.event = Some("session_start".into());
        start.time = chrono::Utc::now();
        self.write_audit(&start);
        let postgres::Session {
            io: mut server,
            pending,
            backend_key,
            standard_strings,
        } = session;
        let strict = !standard_strings;
        let (ended, bytes) = splice(
            &mut client,
            &mut server,
            pending,
            &self.stop,
            strict,
            |text| {
                if entry.db.audit_statements {
                    let mut record = audit.clone();
                    record.event = Some("statement".into());
                    record.time = chrono::Utc::now();
                    record.statement = Some(text);
                    self.write_audit(&record);
                }
            },
        )
        .await;
        let stopped = self.stop.is_cancelled();
        let lost = ended.starts_with(splice::TUNNEL_FAILED);
        self.end(audit, started, bytes, ended);
        // Closing the connection stops a running statement only when the server next writes to
        // it: at shutdown, or when the tunnel stream failed (its client is gone), the bridge
        // cancels it (a cancel for an idle session does nothing), within a bound that keeps
        // the drain short when the database does not answer.
        if (stopped || lost)
            && let Some((pid, key)) = backend_key
        {
            let cancel = postgres::cancel(&entry.db, pid, key);
            match tokio::time::timeout(SHUTDOWN_CANCEL, cancel).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(resource = %name, cause = %e, "cannot cancel the session's statement (the bridge stopping, or the tunnel lost)")
                }
                Err(_) => {
                    tracing::warn!(resource = %name, "the session's statement was not cancelled (the bridge stopping, or the tunnel lost): the database did not answer within 2 s")
                }
            }
        }
    }

    /// A cancel: the `CancelRequest` the cloud sends, passed on to the database.
    async fn cancel<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut client: S,
        entry: &DatabaseEntry,
        mut audit: AuditRecord,
        started: Instant,
    ) {
        let first = tokio::time::timeout(STARTUP_TIMEOUT, read_first_packet(&mut client)).await;
        let ended = match first.unwrap_or_else(|_| Err("nothing within 30 s".into())) {
            Ok(FirstPacket::Cancel(pid, key)) => {
                match postgres::cancel(&entry.db, pid, key).await {
                    Ok(()) => "cancel sent".to_string(),
                    Err(e) => format!("cancel failed at {}: {e}", e.step()),
                }
            }
            Ok(other) => format!("expected a CancelRequest, got {other:?}"),
            Err(e) => format!("cancel unread: {e}"),
        };
        let _ = client.shutdown().await;
        audit.event = Some("cancel".into());
        self.end(audit, started, (16, 0), ended);
    }

    /// The `session_end` record.
    fn end(&self, mut audit: AuditRecord, started: Instant, bytes: (u64, u64), ended: String) {
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        audit.time = chrono::Utc::now();
        audit.event.get_or_insert_with(|| "session_end".into());
        audit.ended = Some(ended);
        (audit.bytes_in, audit.bytes_out) = bytes;
        audit.duration_ms = started.elapsed().as_millis() as u64;
        self.write_audit(&audit);
    }
}
