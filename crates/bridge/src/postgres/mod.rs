//! The bridge's PostgreSQL client: it opens a connection to a declared database, secures it
//! per `sslmode`, and logs in with the entry's credentials (SCRAM-SHA-256, MD5 or cleartext),
//! so that the password never leaves the bridge. Used by database sessions
//! ([`crate::forward`]) and by `bridge check`, which reports the step that failed.

mod error;
mod tls;

use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tunnel::postgres::Param;

pub use error::LoginError;
pub use tls::client_config;

use crate::config::{Database, SslMode};

/// A connection to the database: plain TCP or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How long DNS, TCP and TLS together may take before the step is reported as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the login exchange may take.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest message the bridge reads during login.
const MAX_MESSAGE: usize = 1 << 20;

/// A logged-in session: the connection, and what the server sent from `AuthenticationOk` up to
/// its first `ReadyForQuery` (and anything after that arrived with it).
pub struct Session {
    /// The connection, positioned after `pending`.
    pub io: Box<dyn Io>,
    /// `AuthenticationOk`, the parameter statuses, the backend key and `ReadyForQuery`, as the
    /// server sent them; the client must get them first.
    pub pending: BytesMut,
    /// The server's `BackendKeyData` (process id, secret key), with which the bridge cancels
    /// the session's running statement when it shuts down.
    pub backend_key: Option<(i32, i32)>,
    /// Whether the server reported `standard_conforming_strings` on and a client encoding whose
    /// characters never end in a `\\` byte: strings the statement audit's masking reads as
    /// PostgreSQL does.
    pub standard_strings: bool,
}

/// Opens a connection to `db` and secures it per its `sslmode`; DNS, TCP and TLS each have
/// [`CONNECT_TIMEOUT`], so a step that stalls is named as the one that failed.
pub async fn connect(db: &Database) -> Result<Box<dyn Io>, LoginError> {
    let addr = format!("{}:{}", db.host, db.port);
    let silent = || format!("no answer within {} s", CONNECT_TIMEOUT.as_secs());
    let dns_error = |cause: String| LoginError::Dns {
        host: db.host.clone(),
        cause,
    };
    let addrs: Vec<_> = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::lookup_host((db.host.as_str(), db.port)),
    )
    .await
    .map_err(|_| dns_error(silent()))?
    .map_err(|e| dns_error(e.to_string()))?
    .collect();
    let mut last = None;
    let mut tcp = None;
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                tcp = Some(s);
                break;
            }
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some(silent()),
        }
    }
    let Some(tcp) = tcp else {
        return Err(LoginError::Tcp {
            addr,
            cause: last.unwrap_or_else(|| "no address".into()),
        });
    };
    // A server that takes the connection and then says nothing (stopped, overloaded) is
    // silent, not a TLS problem: the entry's sslmode is not what to look at.
    tokio::time::timeout(CONNECT_TIMEOUT, secure(db, tcp, &addr))
        .await
        .map_err(|_| LoginError::TimedOut(CONNECT_TIMEOUT.as_secs()))?
}

/// Asks for TLS and completes the handshake, per `sslmode`.
async fn secure(db: &Database, mut tcp: TcpStream, addr: &str) -> Result<Box<dyn Io>, LoginError> {
    let _ = tcp.set_nodelay(true);
    let config = client_config(db.sslmode, db.sslrootcert.as_deref()).map_err(LoginError::Tls)?;
    let Some(config) = config else {
        return Ok(Box::new(tcp));
    };
    let mut buf = BytesMut::new();
    frontend::ssl_request(&mut buf);
    tcp.write_all(&buf).await.map_err(|e| LoginError::Tcp {
        addr: addr.to_string(),
        cause: e.to_string(),
    })?;
    let answer = tcp.read_u8().await.map_err(|e| LoginError::Tcp {
        addr: addr.to_string(),
        cause: e.to_string(),
    })?;
    match answer {
        b'S' => {}
        b'N' if db.sslmode == SslMode::Prefer => return Ok(Box::new(tcp)),
        b'N' => {
            return Err(LoginError::Tls(format!(
                "the server at {addr} does not accept TLS, and sslmode is {}; turn ssl on at the server or lower sslmode",
                db.sslmode.name()
            )));
        }
        other => {
            return Err(LoginError::Protocol(format!(
                "the server at {addr} answered the TLS request with byte {other:#04x}; is it PostgreSQL?"
            )));
        }
    }
    let name = rustls::pki_types::ServerName::try_from(db.host.clone()).map_err(|e| {
        LoginError::Tls(format!("{:?} is not a valid TLS server name: {e}", db.host))
    })?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| {
            LoginError::Tls(format!(
                "handshake with {addr} failed: {e}; check sslmode and sslrootcert"
            ))
        })?;
    Ok(Box::new(tls))
}

/// Connects and logs in to `db` as its entry's user, on its entry's database, passing on the
/// client's own startup `params` (never `user` or `database`).
pub async fn login(db: &Database, params: &[Param]) -> Result<Session, LoginError> {
    let io = connect(db).await?;
    tokio::time::timeout(LOGIN_TIMEOUT, authenticate(db, io, params))
        .await
        .map_err(|_| LoginError::TimedOut(LOGIN_TIMEOUT.as_secs()))?
}

async fn authenticate(
    db: &Database,
    mut io: Box<dyn Io>,
    params: &[Param],
) -> Result<Session, LoginError> {
    let user = db.credentials.username.as_str();
    let password = db.credentials.password.expose().as_bytes();
    // The password itself goes out only to a server whose certificate was checked.
    let verified = matches!(db.sslmode, SslMode::VerifyCa | SslMode::VerifyFull);
    let mut startup: Vec<(&str, &[u8])> = vec![
        ("user", user.as_bytes()),
        ("database", db.database.as_bytes()),
    ];
    startup.extend(tunnel::postgres::passed_on(params).map(|(k, v)| (k.as_str(), v.as_slice())));
    if db.read_only {
        startup.retain(|(k, _)| *k != "default_transaction_read_only");
        startup.push(("default_transaction_read_only", b"on"));
    }
    let mut out = BytesMut::from(&tunnel::postgres::startup_message(startup)[..]);
    send(&mut io, &mut out).await?;
    let mut inbox = BytesMut::with_capacity(8 * 1024);
    let mut scram: Option<sasl::ScramSha256> = None;
    loop {
        let (tag, body) = read_message(&mut io, &mut inbox).await?;
        let mut whole = BytesMut::with_capacity(body.len() + 5);
        whole.put_u8(tag);
        whole.put_i32(body.len() as i32 + 4);
        whole.extend_from_slice(&body);
        let message = backend::Message::parse(&mut whole)
            .map_err(|e| LoginError::Protocol(format!("unreadable server message: {e}")))?
            .ok_or_else(|| LoginError::Protocol("truncated server message".into()))?;
        match message {
            backend::Message::AuthenticationOk if scram.is_some() => {
                return Err(LoginError::Protocol(
                    "the server ended SCRAM without proving it knows the password; is it the real server?".into(),
                ));
            }
            backend::Message::AuthenticationOk => {
                return greeting(io, inbox, user).await;
            }
            backend::Message::AuthenticationCleartextPassword if !verified => {
                return Err(LoginError::Insecure(
                    "the server asks for the password in clear over a connection whose server is not verified; use sslmode verify-full (or verify-ca), or have the server ask for SCRAM (pg_hba.conf: scram-sha-256)".into(),
                ));
            }
            backend::Message::AuthenticationCleartextPassword => {
                frontend::password_message(password, &mut out)
                    .map_err(|e| LoginError::Protocol(e.to_string()))?;
            }
            backend::Message::AuthenticationMd5Password(body) => {
                let hashed = md5_hash(user.as_bytes(), password, body.salt());
                frontend::password_message(hashed.as_bytes(), &mut out)
                    .map_err(|e| LoginError::Protocol(e.to_string()))?;
            }
            backend::Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let mut scram_offered = false;
                while let Some(m) = mechanisms
                    .next()
                    .map_err(|e| LoginError::Protocol(e.to_string()))?
                {
                    scram_offered |= m == sasl::SCRAM_SHA_256;
                }
                if !scram_offered {
                    return Err(LoginError::Protocol(
                        "the server offers no SASL mechanism the bridge speaks (SCRAM-SHA-256)"
                            .into(),
                    ));
                }
                let s = sasl::ScramSha256::new(password, sasl::ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, s.message(), &mut out)
                    .map_err(|e| LoginError::Protocol(e.to_string()))?;
                scram = Some(s);
            }
            backend::Message::AuthenticationSaslContinue(body) => {
                let s = scram.as_mut().ok_or_else(|| {
                    LoginError::Protocol("SASL continue before SASL start".into())
                })?;
                s.update(body.data())
                    .map_err(|e| LoginError::Protocol(format!("SCRAM: {e}")))?;
                frontend::sasl_response(s.message(), &mut out)
                    .map_err(|e| LoginError::Protocol(e.to_string()))?;
            }
            backend::Message::AuthenticationSaslFinal(body) => {
                let mut s = scram
                    .take()
                    .ok_or_else(|| LoginError::Protocol("SASL final before SASL start".into()))?;
                s.finish(body.data()).map_err(|e| {
                    LoginError::Protocol(format!("the server's SCRAM proof is wrong: {e}"))
                })?;
            }
            backend::Message::ErrorResponse(_) => return Err(refused(&body, user)),
            backend::Message::NoticeResponse(_) => {}
            _ => {
                return Err(LoginError::Protocol(format!(
                    "unexpected message {:?} during login (the server asks for a method the bridge does not speak, such as GSSAPI)",
                    tag as char
                )));
            }
        }
        if !out.is_empty() {
            send(&mut io, &mut out).await?;
        }
    }
}

/// After `AuthenticationOk`: the server's parameter statuses and backend key, up to the first
/// `ReadyForQuery`, kept for the client. The server may still refuse here (a database that
/// does not exist is only checked after authentication).
async fn greeting(
    mut io: Box<dyn Io>,
    mut inbox: BytesMut,
    user: &str,
) -> Result<Session, LoginError> {
    let mut pending = BytesMut::with_capacity(512);
    pending.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
    let mut backend_key = None;
    let (mut conforming, mut plain_backslash) = (false, true);
    loop {
        let (tag, body) = read_message(&mut io, &mut inbox).await?;
        if tag == b'E' {
            return Err(refused(&body, user));
        }
        if tag == b'S' {
            let mut fields = body[..].split(|&b| b == 0);
            match (fields.next(), fields.next()) {
                (Some(b"standard_conforming_strings"), Some(value)) => conforming = value == b"on",
                (Some(b"client_encoding"), Some(value)) => {
                    plain_backslash = !backslash_encoding(value)
                }
                _ => {}
            }
        }
        if let (b'K', [a, b, c, d, e, f, g, h]) = (tag, &body[..]) {
            backend_key = Some((
                i32::from_be_bytes([*a, *b, *c, *d]),
                i32::from_be_bytes([*e, *f, *g, *h]),
            ));
        }
        pending.put_u8(tag);
        pending.put_i32(body.len() as i32 + 4);
        pending.extend_from_slice(&body);
        if tag == b'Z' {
            pending.extend_from_slice(&inbox);
            return Ok(Session {
                io,
                pending,
                backend_key,
                standard_strings: conforming && plain_backslash,
            });
        }
    }
}

/// Whether `client_encoding` `value` is one where a character's second byte may be `\\`
/// (PostgreSQL's client-only encodings); every other one reads a backslash as itself. The
/// audit's masking reads such a session's statements strictly.
pub fn backslash_encoding(value: &[u8]) -> bool {
    const BACKSLASH_ENCODINGS: [&[u8]; 7] = [
        b"SJIS",
        b"SHIFT_JIS_2004",
        b"BIG5",
        b"GBK",
        b"UHC",
        b"GB18030",
        b"JOHAB",
    ];
    BACKSLASH_ENCODINGS
        .iter()
        .any(|e| value.eq_ignore_ascii_case(e))
}

/// The login error an `ErrorResponse` body stands for.
fn refused(body: &[u8], user: &str) -> LoginError {
    let (code, message) = tunnel::postgres::error_fields(body);
    match code.as_str() {
        "28P01" | "28000" => LoginError::Auth {
            user: user.to_string(),
            code,
            message,
        },
        "3D000" => LoginError::DatabaseMissing { code, message },
        _ => LoginError::Server { code, message },
    }
}

async fn send(io: &mut Box<dyn Io>, out: &mut BytesMut) -> Result<(), LoginError> {
    io.write_all(out).await.map_err(|e| {
        LoginError::Protocol(format!("the connection failed while logging in: {e}"))
    })?;
    out.clear();
    io.flush()
        .await
        .map_err(|e| LoginError::Protocol(format!("the connection failed while logging in: {e}")))
}

/// Reads one backend message (`tag`, body) from `io`, buffering in `inbox`.
async fn read_message(
    io: &mut Box<dyn Io>,
    inbox: &mut BytesMut,
) -> Result<(u8, BytesMut), LoginError> {
    loop {
        if inbox.len() >= 5 {
            let len = i32::from_be_bytes([inbox[1], inbox[2], inbox[3], inbox[4]]);
            if !(4..=MAX_MESSAGE as i32).contains(&len) {
                return Err(LoginError::Protocol(format!(
                    "a server message claims {len} bytes; is this PostgreSQL?"
                )));
            }
            let total = 1 + len as usize;
            if inbox.len() >= total {
                let tag = inbox.get_u8();
                inbox.advance(4);
                let body = inbox.split_to(total - 5);
                return Ok((tag, body));
            }
        }
        let n = io.read_buf(inbox).await.map_err(|e| {
            LoginError::Protocol(format!("the connection failed while logging in: {e}"))
        })?;
        if n == 0 {
            return Err(LoginError::Protocol(
                "the server closed the connection during login".into(),
            ));
        }
    }
}

/// Sends a `CancelRequest` for the server's session `(process_id, secret_key)` on a new
/// connection, as a client's Ctrl-C would.
pub async fn cancel(db: &Database, process_id: i32, secret_key: i32) -> Result<(), LoginError> {
    let mut io = connect(db).await?;
    tunnel::postgres::send_cancel(&mut io, process_id, secret_key)
        .await
        .map_err(|e| LoginError::Protocol(format!("the cancel request failed: {e}")))
}

/// Ends a logged-in session politely (`Terminate`), as `bridge check` does after its login.
pub async fn terminate(session: Session) {
    let mut io = session.io;
    let _ = io.write_all(&[b'X', 0, 0, 0, 4]).await;
    let _ = io.shutdown().await;
}
