//! The connect/upgrade handshake: `GET /v1/bridge/connect` with these headers, answered by
//! `101 Switching Protocols` (the roles then flip: the cloud is the HTTP/2 client).

/// Enrollment: token + CSR in, short-lived client certificate out.
pub const ENROLL_PATH: &str = "/v1/bridge/enroll";
/// The tunnel's upgrade request.
pub const CONNECT_PATH: &str = "/v1/bridge/connect";
/// Value of the `Upgrade` header.
pub const UPGRADE_PROTOCOL: &str = "signals-bridge-h2";

/// The bridge's name (`SERVICE_BRIDGE_NAME`).
pub const HEADER_NAME: &str = "x-bridge-name";
/// A random id per bridge process, so several instances of one bridge are told apart.
pub const HEADER_INSTANCE: &str = "x-bridge-instance";
/// The bridge's release version (`CARGO_PKG_VERSION`).
pub const HEADER_VERSION: &str = "x-bridge-version";
/// The tunnel protocol version the bridge speaks.
pub const HEADER_PROTOCOL: &str = "x-bridge-protocol";
/// The bridge's heartbeat interval in seconds (the cloud heartbeats at the same pace).
pub const HEADER_HEARTBEAT: &str = "x-bridge-heartbeat";
/// JSON list of [`crate::ResourceInfo`]: names and kinds, never credentials.
pub const HEADER_RESOURCES: &str = "x-bridge-resources";
/// Why the cloud refused a connect (also in the problem body), for the bridge's log.
pub const HEADER_REFUSAL: &str = "x-bridge-refusal";
/// On a connect, asks for every check of a tunnel (token, client certificate, name, protocol,
/// room) and `204 No Content` instead of the tunnel: what `bridge check` sends, so that a
/// configured certificate the cloud would refuse fails the check, not the first run.
pub const HEADER_CHECK: &str = "x-bridge-check";

/// Set by the cloud on each forwarded request: its request id (for audit records).
pub const HEADER_REQUEST_ID: &str = "x-request-id";
/// Set by the cloud on each forwarded request: the API key id that asked.
pub const HEADER_PRINCIPAL: &str = "x-bridge-principal";
/// Set by the cloud on each forwarded request: the numeric id of the calling org.
pub const HEADER_ORG: &str = "x-bridge-org";

/// Set by the cloud when HTTP/2 cannot carry the caller's method on a path (`CONNECT`): the
/// stream goes as a `GET` and the bridge admits, refuses and audits it by this method.
pub const HEADER_METHOD: &str = "x-bridge-method";

/// Path of the cloud's application heartbeat, sent through the tunnel to the bridge.
pub const HEARTBEAT_PATH: &str = "/_bridge/heartbeat";

/// Path the cloud posts to through the tunnel just before it closes a tunnel whose token was
/// revoked, with the reason in [`HEADER_REFUSAL`]: the bridge reports `unauthorized` at once
/// and waits as after a refusal, instead of first reconnecting (after its back-off) to learn it.
pub const REVOKED_PATH: &str = "/_bridge/revoked";

/// HTTP/2 flow-control window per stream, both sides: big enough that one bulk transfer is not
/// throttled by round trips (the defaults are 64 KiB–2 MiB; 4 MiB is 80 MB/s at 50 ms).
pub const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
/// HTTP/2 flow-control window of the whole tunnel connection: sixteen streams' windows. Data
/// a caller does not read stays in its stream's window, which counts against this one too:
/// were it only a few streams' worth, a few callers that stop reading (or read slowly) would
/// hold every other stream of the tunnel up.
pub const CONNECTION_WINDOW: u32 = 16 * STREAM_WINDOW;
/// Largest HTTP/2 frame either side accepts (fewer frames per megabyte than the 16 KiB default).
pub const MAX_FRAME: u32 = 256 * 1024;

/// Largest head of an internal system's answer, as HTTP/2 counts it (each header's name and
/// value plus 32 bytes), that the bridge passes into the tunnel: HTTP/2's default of 16 KiB is
/// less than some internal systems send (many cookies, long policies). A bigger head (hyper's
/// HTTP/1 client reads up to 400 KiB of one) is refused by the bridge with a `502` that says
/// so, never a broken stream.
pub const MAX_RESPONSE_HEAD: u32 = 256 * 1024;

/// What the cloud's end of the tunnel accepts: [`MAX_RESPONSE_HEAD`] and room for what the
/// bridge's HTTP/2 layer adds to a head it passed (`:status`, `date`, `content-length`).
pub const MAX_TUNNEL_HEAD: u32 = MAX_RESPONSE_HEAD + 4 * 1024;

/// HTTP/2's guards against a peer that resets streams in bulk (h2 defaults: 20 streams reset
/// before they were accepted, 1,024 local error resets), sized for the tunnel's one trusted,
/// authenticated and heavily multiplexed peer: when many callers hang up at once, the cloud
/// rightly resets all their streams, and h2's defaults then closed the whole tunnel, failing
/// every other caller until the bridge reconnected. The public listeners keep the defaults.
pub const MAX_RESET_STREAMS: usize = 100_000;

/// The protocol version this build speaks. Version 2 adds database streams (HTTP/2 extended
/// CONNECT, [`DATABASE_PROTOCOL`]); a version 1 bridge serves every other kind.
pub const PROTOCOL_VERSION: u32 = 2;
/// The oldest protocol version the cloud still accepts: one release back, so that operators
/// upgrade the cloud first and then the bridges one instance at a time, without an outage.
pub const MIN_PROTOCOL_VERSION: u32 = 1;

/// The `:protocol` of the extended CONNECT (RFC 8441) that opens a database session: the
/// stream then carries the PostgreSQL protocol both ways. The cloud writes the client's
/// startup message first (its `user` and `database` removed: the bridge's entry decides
/// those); the bridge logs in and answers with what the server sends from `AuthenticationOk`
/// on, or with an `ErrorResponse` saying why it could not.
pub const DATABASE_PROTOCOL: &str = "postgresql";
/// The last path segment of a database stream that carries a `CancelRequest` (with the
/// server's own process id and key) instead of a session: `/databases/{name}/cancel`.
pub const DATABASE_CANCEL: &str = "cancel";

/// Whether the cloud accepts a bridge speaking `version`; `Err` says why not, for both logs.
pub fn check_protocol(version: &str) -> Result<u32, String> {
    let v: u32 = version
        .trim()
        .parse()
        .map_err(|_| format!("protocol version {version:?} is not a number"))?;
    let upgrade = if v > PROTOCOL_VERSION {
        "upgrade the cloud first (then the bridges), or run the bridge release that matches it"
    } else {
        "upgrade the bridge"
    };
    if (MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "bridge protocol version {v} is not supported; this cloud accepts {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}: {upgrade}"
        ))
    }
}

/// What [`is_valid_bridge_name`] accepts, for error messages on both sides.
pub const BRIDGE_NAME_RULE: &str =
    "1 to 63 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit";

/// A bridge name (and an org slug): the cloud issues tokens only for such names and the bridge
/// refuses to start with another, so the two always agree. It is a URL path segment and part
/// of the client certificate's name, hence the narrow alphabet.
pub fn is_valid_bridge_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_are_what_the_cloud_issues_tokens_for() {
        for ok in ["dc1", "eu-west.1", "a", "0_x", &"a".repeat(63)] {
            assert!(is_valid_bridge_name(ok), "{ok:?}");
        }
        for bad in ["", "DC1", "-dc", ".x", "a b", "dc/1", &"a".repeat(64)] {
            assert!(!is_valid_bridge_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn protocol_versions() {
        assert_eq!(check_protocol("1"), Ok(1));
        assert_eq!(check_protocol("2"), Ok(2));
        assert!(
            check_protocol("99")
                .unwrap_err()
                .contains("upgrade the cloud")
        );
        assert!(
            check_protocol("0")
                .unwrap_err()
                .contains("upgrade the bridge")
        );
        assert!(check_protocol("x").is_err());
    }
}
