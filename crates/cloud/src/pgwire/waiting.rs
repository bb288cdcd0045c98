//! A session's client while its database stream opens: the stream may wait seconds for a slot
//! at the bridge, and a client that gives up meanwhile must not leave the bridge to log in for
//! no one.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes kept from a client that talks before its session is ready (the protocol has it
/// wait for `ReadyForQuery`; a pipelining client's first messages are small).
const EARLY_LIMIT: usize = 64 * 1024;

/// Resolves, saying how, once the client has gone (closed its connection or cut it) or has
/// sent more than [`EARLY_LIMIT`] bytes; until then anything it sends is kept in `early`, to
/// go to the database once the session is open.
pub(super) async fn client_left<S: AsyncRead + Unpin>(
    client: &mut S,
    early: &mut Vec<u8>,
) -> &'static str {
    let mut buf = [0u8; 4096];
    loop {
        match client.read(&mut buf).await {
            Ok(0) => return "the client closed its connection while the session waited to open",
            Err(_) => return "the client's connection was cut while the session waited to open",
            Ok(n) if early.len() + n > EARLY_LIMIT => {
                return "the client sent more than 64 KiB before its session was ready; a client waits for ReadyForQuery before it sends queries";
            }
            Ok(n) => early.extend_from_slice(&buf[..n]),
        }
    }
}
