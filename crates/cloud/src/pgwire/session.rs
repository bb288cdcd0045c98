//! One PostgreSQL session: startup, the API key as a cleartext password (on the TLS port; the
//! upgrade route has it from its `Authorization`), the database stream through the tunnel,
//! the server's greeting (its backend key replaced by the cloud's own), then bytes both ways.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tunnel::postgres::{
    FirstPacket, Param, error_response, negotiation, param, passed_on, read_first_packet,
    startup_message,
};

use super::splice::{Ending, Spliced, splice};
use super::{PgState, STARTUP_TIMEOUT};
use crate::auth::Principal;
use crate::problem::Problem;

/// How long the bridge has to open the database stream, log in and send the server's greeting.
const GREETING_TIMEOUT: Duration = Duration::from_secs(60);

/// The SQLSTATE and message a client reads for a relay refusal.
fn refusal(problem: &Problem, bridge: &str, database: &str) -> (&'static str, String) {
    let code = match problem.status {
        401 | 403 => "28P01",
        404 => "3D000",
        503 if problem.detail.contains("max_connections") => "53300",
        503 => "57P03",
        _ => "08006",
    };
    let message = match code {
        "3D000" => format!(
            "no database {bridge}/{database}: {}; dbname is BRIDGE/DATABASE (through cloud db-proxy: its --bridge and --database), a bridge of this org and a databases entry it declares",
            problem.detail
        ),
        "53300" => format!(
            "too many connections to {bridge}/{database}: {}",
            problem.detail
        ),
        _ => problem.detail.clone(),
    };
    (code, message)
}

/// Resolves at shutdown while a session is still opening (`spliced` unset): the caller drops
/// it then. Once spliced, never: from then on the session ends itself at shutdown, telling
/// the client why.
pub(super) async fn stopped_while_opening(stop: &CancellationToken, spliced: &AtomicBool) {
    stop.cancelled().await;
    if spliced.load(Ordering::Acquire) {
        std::future::pending::<()>().await;
    }
}

/// Tells a client whose session was still opening when the service began to stop why it ends
/// (`57P03`, as PostgreSQL answers a connection while it shuts down), then closes.
pub(super) async fn refuse_at_shutdown<S: AsyncWrite + Unpin>(client: &mut S) {
    let message = error_response(
        "57P03",
        "the service is shutting down; connect again shortly",
    );
    let _ = tokio::time::timeout(super::splice::FINISH_MESSAGE, client.write_all(&message)).await;
    close(client).await;
}

/// Runs a session on the TLS port to its end; sets `spliced` once its greeting is through.
pub(super) async fn run<S>(front: &PgState, mut client: S, peer: SocketAddr, spliced: &AtomicBool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let packet = tokio::time::timeout(STARTUP_TIMEOUT, read_first_packet(&mut client)).await;
    let params = match packet {
        Ok(Ok(FirstPacket::Startup { minor, params })) => {
            if let Some(answer) = negotiation(minor, &params)
                && client.write_all(&answer).await.is_err()
            {
                return;
            }
            params
        }
        Ok(Ok(FirstPacket::Cancel(pid, key))) => {
            front.cancels.cancel(&front.relay, pid, key, None).await;
            return;
        }
        Ok(Ok(other)) => {
            let message = match other {
                FirstPacket::Other(code) => format!(
                    "unsupported protocol version {}.{} (request code {code}); this server speaks PostgreSQL protocol 3",
                    code >> 16,
                    code & 0xffff
                ),
                other => format!("expected a startup message inside TLS, got {other:?}"),
            };
            let _ = client.write_all(&error_response("08P01", &message)).await;
            return;
        }
        Ok(Err(why)) => {
            tracing::debug!(peer = %peer, why, "unreadable PostgreSQL startup");
            return;
        }
        Err(_) => return,
    };
    let dbname = param(&params, "database").unwrap_or_default();
    let Some((bridge, database)) = dbname
        .split_once('/')
        .filter(|(b, d)| !b.is_empty() && !d.is_empty())
    else {
        let message = format!(
            "dbname {dbname:?} does not name a database behind a bridge; use dbname=BRIDGE/DATABASE, e.g. dbname=dc1/orders"
        );
        let _ = client.write_all(&error_response("3D000", &message)).await;
        return;
    };
    let (bridge, database) = (bridge.to_string(), database.to_string());
    let principal = match password(front, &mut client).await {
        Ok(principal) => principal,
        Err((code, message)) => {
            // Failed logins are for the operator to see (a password being guessed); what was
            // sent is never logged.
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, sqlstate = code, why = %message, "database login refused");
            let _ = client.write_all(&error_response(code, &message)).await;
            return;
        }
    };
    let target = Session {
        principal,
        bridge,
        database,
        peer,
    };
    serve(front, client, &target, &params, spliced).await;
}

/// Why a session that asks for a replication connection is refused, if it does: the startup
/// parameter is never passed on, and without this the client's first replication command
/// (`IDENTIFY_SYSTEM`) would read as a syntax error.
fn replication(params: &[Param]) -> Option<String> {
    let mode = param(params, "replication")?;
    let off = ["false", "off", "no", "0", ""];
    (!off.contains(&mode.to_ascii_lowercase().as_str())).then(|| {
        format!(
            "replication connections (replication={mode}) are not served through the bridge: it reaches a database, not its cluster's replication stream"
        )
    })
}

/// How often an open session's API key is checked again (a cached look: a revocation reaches
/// the cache within about a second).
const KEY_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Who a session is for, once the key is checked.
pub(super) struct Session {
    pub principal: Principal,
    pub bridge: String,
    pub database: String,
    pub peer: SocketAddr,
}

/// Opens the database stream for `target` and relays the session to its end, then closes
/// the client's connection cleanly (TLS's close_notify included), so that a refusal reads as
/// the error it sent, not as a connection cut. Sets `spliced` once the greeting is through.
pub(super) async fn serve<S>(
    front: &PgState,
    mut client: S,
    target: &Session,
    params: &[Param],
    spliced: &AtomicBool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    relay(front, &mut client, target, params, spliced).await;
    close(&mut client).await;
}

/// Closes the client's side cleanly within [`super::splice::FINISH_MESSAGE`]: TLS's
/// close_notify waits behind what the client has not read, and a client that stopped reading
/// would hold the connection open for as long as it likes. Past that, it is dropped.
async fn close<S: AsyncWrite + Unpin>(client: &mut S) {
    let _ = tokio::time::timeout(super::splice::FINISH_MESSAGE, client.shutdown()).await;
}

async fn relay<S>(
    front: &PgState,
    client: &mut S,
    target: &Session,
    params: &[Param],
    spliced_flag: &AtomicBool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Session {
        principal,
        bridge,
        database,
        peer,
    } = target;
    let (bridge, database) = (bridge.clone(), database.clone());
    if let Some(why) = replication(params) {
        tracing::info!(peer = %peer, bridge = %bridge, database = %database, why, "database session refused");
        let _ = client.write_all(&error_response("0A000", &why)).await;
        return;
    }
    // One deadline for opening the stream and the greeting: a bridge that stopped answering
    // is said within it, not after the tunnel's own keep-alive gives up.
    let deadline = tokio::time::Instant::now() + GREETING_TIMEOUT;
    // The stream may wait for a slot at the bridge (`max_connections`): a client that gives
    // up meanwhile drops it, so the bridge records that it left and logs in for no one.
    let mut early = Vec::new();
    let opened = tokio::select! {
        opened = tokio::time::timeout_at(
            deadline,
            crate::relay::open_database(&front.relay, principal, &bridge, &database, false),
        ) => opened,
        left = super::waiting::client_left(client, &mut early) => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, why = left, "database session not opened");
            let _ = client.write_all(&error_response("08P01", left)).await;
            return;
        }
    };
    let mut stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(problem)) => {
            let (code, message) = refusal(&problem, &bridge, &database);
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, sqlstate = code, why = %message, "database session refused");
            let _ = client.write_all(&error_response(code, &message)).await;
            return;
        }
        Err(_) => {
            let why = "the bridge did not answer within 60 s; see the bridge's log, and retry";
            tracing::warn!(peer = %peer, bridge = %bridge, database = %database, why, "database session not opened");
            let _ = client.write_all(&error_response("08006", why)).await;
            return;
        }
    };
    let passed = passed_on(params).map(|(k, v)| (k.as_str(), v.as_slice()));
    if stream.io.write_all(&startup_message(passed)).await.is_err() {
        let why = "the tunnel failed while opening the session; retry";
        tracing::warn!(peer = %peer, bridge = %bridge, database = %database, why, "database session not opened");
        let _ = client.write_all(&error_response("08006", why)).await;
        return;
    }
    // The greeting: everything up to the first ReadyForQuery (or a FATAL error), with the
    // server's BackendKeyData replaced by a key of the cloud's. The bridge may take up to
    // 20 s logging in: a client that gives up meanwhile ends the stream, and the log says that
    // it left, not that it was told (the bridge's own login runs to its end or time-out).
    let greeted = {
        let (mut reader, mut writer) = tokio::io::split(&mut *client);
        tokio::select! {
            greeted = tokio::time::timeout_at(
                deadline,
                greeting(front, &mut writer, &mut stream.io, target),
            ) => greeted.unwrap_or(Err(
                "the bridge did not finish logging in to the database within 60 s; see the bridge's log",
            )),
            left = super::waiting::client_left(&mut reader, &mut early) => {
                tracing::info!(peer = %peer, bridge = %bridge, database = %database, why = left, "database session not opened");
                // Said to a client that is still there (one that sent too much too early).
                let _ = writer.write_all(&error_response("08P01", left)).await;
                return;
            }
        }
    };
    let registered = match greeted {
        Ok((registered, true)) => registered,
        // The server (or the bridge's login to it) refused the session; its error has reached
        // the client, and the bridge's log and audit say why.
        Ok((_, false)) => {
            tracing::warn!(peer = %peer, bridge = %bridge, database = %database, principal = %principal.key_id, "database session not opened: the bridge could not reach the database, or the database or the bridge's login to it refused it (the client was told; the bridge's log says why)");
            return;
        }
        Err(why) => {
            tracing::warn!(peer = %peer, bridge = %bridge, database = %database, why, "database session not opened");
            let _ = client.write_all(&error_response("08006", why)).await;
            return;
        }
    };
    tracing::info!(peer = %peer, bridge = %bridge, database = %database, principal = %principal.key_id, instance = %stream.instance, "database session opened");
    // A revoked key ends its sessions too, not only new ones (as a revoked token its tunnels).
    let ended = async {
        tokio::select! {
            () = front.stop.cancelled() => Ending {
                code: "57P01",
                message: "terminating connection: the service is shutting down; connect again shortly".into(),
            },
            () = async {
                loop {
                    tokio::time::sleep(KEY_RECHECK).await;
                    if !front.relay.keys.is_live(&front.relay.store, principal).await {
                        return;
                    }
                }
            } => Ending {
                code: "28000",
                message: "terminating connection: its API key was revoked; connect again with a live API key of the org".into(),
            },
        }
    };
    spliced_flag.store(true, Ordering::Release);
    let spliced = splice(client, &mut stream.io, &early, ended).await;
    // The server would run the statement in progress to its end, for a session the cloud
    // ended or a client that went away mid-statement without a word (its connection cut, or
    // closed without Terminate): cancel it, through the tunnel, which at shutdown closes only
    // after the sessions have ended.
    let running = matches!(
        spliced,
        Spliced::Ended { .. } | Spliced::Failed { running: true, .. }
    );
    if let (true, Some(registered)) = (running, &registered) {
        let (process_id, secret_key) = registered.key();
        front
            .cancels
            .cancel(&front.relay, process_id, secret_key, None)
            .await;
    }
    drop(registered);
    match spliced {
        Spliced::Closed { up, down } => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, bytes_in = up, bytes_out = down, "database session closed")
        }
        Spliced::Ended { ending, told } => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, cause = %ending.message, told_client = told, "database session ended by the cloud")
        }
        Spliced::Lost { told } => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, told_client = told, "database session lost: the bridge's side ended it without a word (the bridge stopped, its tunnel or its database connection broke, or the database closed it: its own log says why)")
        }
        // Many clients (pgbench, libpq on exit) close the socket without TLS's close_notify:
        // that is their way of leaving, not an error.
        Spliced::Failed { error: e, .. } if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, "database session closed (the client left without closing TLS)")
        }
        Spliced::Failed { error: e, .. } => {
            tracing::info!(peer = %peer, bridge = %bridge, database = %database, cause = %e, "database session ended with an error")
        }
    }
}

/// Relays the server's greeting, up to its first `ReadyForQuery` (or a fatal error), with its
/// `BackendKeyData` replaced by a key of the cloud's; returns that key's registration. Past
/// the greeting the stream is spliced without looking at it. `false` when the greeting ended
/// with the server's error instead of `ReadyForQuery`.
async fn greeting<C, B>(
    front: &PgState,
    client: &mut C,
    bridge_io: &mut B,
    target: &Session,
) -> Result<(Option<super::cancel::Registered>, bool), &'static str>
where
    C: AsyncWrite + Unpin,
    B: AsyncRead + Unpin,
{
    let closed = "the bridge closed the session before it was ready; see the bridge's log";
    let mut registered = None;
    // The greeting goes out whole, in as few TLS records as it fits: a pooler in front
    // (PgBouncer) refuses a login message that arrives in pieces ("partial pkt in login phase").
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        bridge_io.read_exact(&mut head).await.map_err(|_| closed)?;
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        if !(4..=1 << 24).contains(&len) {
            return Err("the bridge sent a malformed message; see the bridge's log");
        }
        let mut body = vec![0u8; len as usize - 4];
        bridge_io.read_exact(&mut body).await.map_err(|_| closed)?;
        if head[0] == b'K' && body.len() == 8 {
            let server = (
                i32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
            );
            let (key, guard) =
                front
                    .cancels
                    .register(&target.principal, &target.bridge, &target.database, server);
            body[..4].copy_from_slice(&key.0.to_be_bytes());
            body[4..].copy_from_slice(&key.1.to_be_bytes());
            registered = Some(guard);
        }
        out.extend_from_slice(&head);
        out.extend_from_slice(&body);
        let last = head[0] == b'Z' || head[0] == b'E';
        if last || out.len() >= GREETING_HELD {
            if client.write_all(&out).await.is_err() || client.flush().await.is_err() {
                return Err(closed);
            }
            out.clear();
        }
        if last {
            return Ok((registered, head[0] == b'Z'));
        }
    }
}

/// Most bytes of the greeting held before they are sent on (a server's greeting is a few
/// hundred bytes; one that talks on is sent in pieces this large).
const GREETING_HELD: usize = 64 * 1024;

/// Asks for a cleartext password and authenticates it as an API key.
async fn password<S>(front: &PgState, client: &mut S) -> Result<Principal, (&'static str, String)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    client
        .write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3])
        .await
        .map_err(|e| ("08006", e.to_string()))?;
    let read = async {
        let tag = client.read_u8().await.map_err(|e| e.to_string())?;
        let len = client.read_i32().await.map_err(|e| e.to_string())?;
        if tag != b'p' {
            return Err(format!(
                "expected a password message ('p'), got one of type {:?}: send the API key as the password",
                tag as char
            ));
        }
        if !(5..=4096).contains(&len) {
            return Err(format!(
                "the password message's length field says {len}, expected 5 to 4096 (an API key is short)"
            ));
        }
        let mut body = vec![0u8; len as usize - 4];
        client
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        Ok(
            String::from_utf8_lossy(body.split(|&b| b == 0).next().unwrap_or_default())
                .into_owned(),
        )
    };
    let key = tokio::time::timeout(STARTUP_TIMEOUT, read)
        .await
        .map_err(|_| "no password within 30 s".to_string())
        .and_then(|r| r)
        .map_err(|why| ("08P01", why))?;
    front
        .relay
        .keys
        .authenticate_key(&front.relay.store, &key)
        .await
        .map_err(|p| {
            if p.status != 401 {
                ("57P03", p.detail)
            } else if let Some(other) = crate::secrets::named_kind(&key)
                .filter(|_| !key.starts_with(crate::secrets::Kind::ApiKey.prefix()))
            {
                ("28P01", format!("password authentication failed: the password is {other}, not an API key (sigapi_…); create one with `cloud api-key create --org ORG`"))
            } else {
                ("28P01", "password authentication failed: the password must be a live API key of the org that owns the bridge (this one is mistyped, cut, revoked or of no org; create one with `cloud api-key create --org ORG`)".to_string())
            }
        })
}

#[cfg(test)]
mod tests;
