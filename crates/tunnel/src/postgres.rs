//! The few PostgreSQL wire messages both halves handle around a database stream: the startup
//! message (the client's, which the cloud reads and passes on as the stream's first bytes, and
//! the bridge reads back) and `ErrorResponse` (which either side writes when it refuses).
//! Everything else on the stream is the server's and the client's own protocol.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Protocol 3.0 in a startup message.
pub const PROTOCOL_3: i32 = 196_608;
/// The request code of an `SSLRequest`.
pub const SSL_REQUEST: i32 = 80_877_103;
/// The request code of a `GSSENCRequest`.
pub const GSSENC_REQUEST: i32 = 80_877_104;
/// The request code of a `CancelRequest`.
pub const CANCEL_REQUEST: i32 = 80_877_102;
/// The longest startup message either side reads.
pub const MAX_STARTUP: usize = 10_000;

/// One startup parameter: its name, and its value as the client sent it (bytes: a value need
/// not be UTF-8, and is passed on unchanged).
pub type Param = (String, Vec<u8>);

/// The first packet of a connection: a startup message, or one of the special requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPacket {
    /// Protocol 3.`minor` with its parameters. A server speaking 3.0 answers a newer minor
    /// version, or `_pq_.` options, with [`negotiation`] first, as PostgreSQL does.
    Startup {
        /// The minor version asked for (0 for 3.0).
        minor: u16,
        /// The parameters, in the client's order.
        params: Vec<Param>,
    },
    /// `SSLRequest`.
    Ssl,
    /// `GSSENCRequest`.
    GssEnc,
    /// `CancelRequest` with the process id and secret key.
    Cancel(i32, i32),
    /// Anything else: the protocol or request code.
    Other(i32),
}

/// Reads the first packet (length, code, body) of a connection; `Err` says what was wrong.
pub async fn read_first_packet<S: AsyncRead + Unpin>(io: &mut S) -> Result<FirstPacket, String> {
    let len = io
        .read_i32()
        .await
        .map_err(|e| format!("no startup packet: {e}"))?;
    if !(8..=MAX_STARTUP as i32).contains(&len) {
        return Err(format!(
            "a startup packet of {len} bytes (between 8 and {MAX_STARTUP} expected)"
        ));
    }
    let mut body = vec![0u8; len as usize - 4];
    io.read_exact(&mut body)
        .await
        .map_err(|e| format!("a truncated startup packet: {e}"))?;
    let code = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let rest = &body[4..];
    Ok(match code {
        SSL_REQUEST => FirstPacket::Ssl,
        GSSENC_REQUEST => FirstPacket::GssEnc,
        CANCEL_REQUEST if rest.len() == 8 => FirstPacket::Cancel(
            i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]),
            i32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]),
        ),
        code if code >> 16 == 3 => FirstPacket::Startup {
            minor: (code & 0xffff) as u16,
            params: parameters(rest),
        },
        other => FirstPacket::Other(other),
    })
}

fn parameters(mut rest: &[u8]) -> Vec<Param> {
    let mut params = Vec::new();
    let next = |rest: &mut &[u8]| {
        let end = rest.iter().position(|&b| b == 0)?;
        let field = rest[..end].to_vec();
        *rest = &rest[end + 1..];
        Some(field)
    };
    while let Some(name) = next(&mut rest) {
        if name.is_empty() {
            break;
        }
        let Some(value) = next(&mut rest) else { break };
        params.push((String::from_utf8_lossy(&name).into_owned(), value));
    }
    params
}

/// The value of parameter `name`, as text.
pub fn param(params: &[Param], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// Startup parameters that never pass from a client to the database: `user` and `database`
/// (the bridge's entry decides them) and `replication` (a replication connection would read
/// the whole cluster's changes).
pub const NOT_PASSED_ON: [&str; 3] = ["user", "database", "replication"];

/// The client's startup parameters that are passed on to the database (protocol options,
/// `_pq_.*`, are the connection's own and answered by [`negotiation`]).
pub fn passed_on(params: &[Param]) -> impl Iterator<Item = &Param> {
    params
        .iter()
        .filter(|(k, _)| !NOT_PASSED_ON.contains(&k.as_str()) && !k.starts_with("_pq_."))
}

/// The `NegotiateProtocolVersion` a 3.0 server sends before anything else to a client that
/// asked for a newer minor version or for protocol options (`_pq_.*`): 3.0, and the options it
/// does not know (all of them). `None` when the client asked for neither. libpq then goes on
/// in 3.0, as with a PostgreSQL server older than it.
pub fn negotiation(minor: u16, params: &[Param]) -> Option<Vec<u8>> {
    let options: Vec<&str> = params
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| k.starts_with("_pq_."))
        .collect();
    if minor == 0 && options.is_empty() {
        return None;
    }
    // The version as a startup message's (3.0 is 196608), as PostgreSQL writes it: libpq 18
    // reads a smaller number as a downgrade to before 3.0 and gives up.
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    body.extend_from_slice(&(options.len() as i32).to_be_bytes());
    for option in options {
        body.extend_from_slice(option.as_bytes());
        body.push(0);
    }
    let mut out = vec![b'v'];
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

/// Writes a `CancelRequest` on `io` (a connection of its own, as the protocol wants), then
/// waits up to 10 s for the peer to close it, which it does once the request is read.
pub async fn send_cancel<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    process_id: i32,
    secret_key: i32,
) -> std::io::Result<()> {
    io.write_all(&cancel_request(process_id, secret_key))
        .await?;
    io.flush().await?;
    let mut sink = [0u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(10), io.read(&mut sink)).await;
    Ok(())
}

/// A protocol 3.0 startup message with `params`.
pub fn startup_message<'a>(params: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    for (name, value) in params {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(value);
        body.push(0);
    }
    body.push(0);
    let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A `CancelRequest` for the server session `(process_id, secret_key)`.
pub fn cancel_request(process_id: i32, secret_key: i32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&16i32.to_be_bytes());
    out[4..8].copy_from_slice(&CANCEL_REQUEST.to_be_bytes());
    out[8..12].copy_from_slice(&process_id.to_be_bytes());
    out[12..].copy_from_slice(&secret_key.to_be_bytes());
    out
}

/// A `FATAL` `ErrorResponse` with SQLSTATE `code` and `message`, as a server sends it.
pub fn error_response(code: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        body.push(kind);
        body.extend_from_slice(value.replace('\0', " ").as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = vec![b'E'];
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The SQLSTATE (`C`) and message (`M`) fields of an `ErrorResponse` body.
pub fn error_fields(body: &[u8]) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    let mut rest = body;
    while let Some((&kind, tail)) = rest.split_first() {
        if kind == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        let value = String::from_utf8_lossy(&tail[..end]).into_owned();
        match kind {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
        rest = tail.get(end + 1..).unwrap_or_default();
    }
    (code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn startup_messages_round_trip() {
        let params = vec![
            ("application_name".to_string(), b"caf\xe9".to_vec()),
            ("options".to_string(), b"-c search_path=app".to_vec()),
        ];
        let bytes = startup_message(params.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        let read = read_first_packet(&mut &bytes[..]).await.unwrap();
        assert_eq!(
            read,
            FirstPacket::Startup {
                minor: 0,
                params: params.clone()
            }
        );
        assert_eq!(negotiation(0, &params), None);
        assert_eq!(
            param(&params, "options").as_deref(),
            Some("-c search_path=app")
        );
        let cancel = cancel_request(42, -7);
        assert_eq!(
            read_first_packet(&mut &cancel[..]).await.unwrap(),
            FirstPacket::Cancel(42, -7)
        );
        let huge = (MAX_STARTUP as i32 + 1).to_be_bytes();
        assert!(read_first_packet(&mut &huge[..]).await.is_err());
    }

    /// libpq 18 asks for 3.2 with `max_protocol_version=latest` (3.9999 in its betas): the
    /// startup is read, and the answer says 3.0 and names the options not taken.
    #[tokio::test]
    async fn a_newer_minor_version_is_negotiated_down_to_3_0() {
        let params = [
            ("user".to_string(), b"ci".to_vec()),
            ("_pq_.test_option".to_string(), b"on".to_vec()),
        ];
        let mut bytes = startup_message(params.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        bytes[4..8].copy_from_slice(&(PROTOCOL_3 | 2).to_be_bytes());
        let read = read_first_packet(&mut &bytes[..]).await.unwrap();
        let FirstPacket::Startup { minor, params } = read else {
            panic!("{read:?}");
        };
        assert_eq!(minor, 2);
        assert_eq!(passed_on(&params).count(), 0);
        let mut expected = b"v\0\0\0\x1d\0\x03\0\0\0\0\0\x01".to_vec();
        expected.extend_from_slice(b"_pq_.test_option\0");
        assert_eq!(negotiation(minor, &params), Some(expected));
        assert_eq!(
            negotiation(2, &[]),
            Some(b"v\0\0\0\x0c\0\x03\0\0\0\0\0\0".to_vec())
        );
    }

    #[test]
    fn error_responses_round_trip() {
        let e = error_response("53300", "too many connections");
        assert_eq!(e[0], b'E');
        assert_eq!(
            error_fields(&e[5..]),
            ("53300".to_string(), "too many connections".to_string())
        );
    }
}
