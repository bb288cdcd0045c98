//! The body of a refused request, read and dropped before the refusal goes out. An answer
//! sent while the client is still sending makes the server end what it is sending on: the
//! stream under HTTP/2 (`RST_STREAM`), the connection under HTTP/1.1. Some clients then show
//! a transport error instead of the answer that says what to fix (curl 7.88 over HTTP/2:
//! "Stream error in the HTTP/2 framing layer"; an HTTP/1.1 client still writing: a reset).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use http_body::Body as _;
use http_body_util::BodyExt;

/// Most bytes read and dropped for one refused request: past them the client gets the
/// reset, as it would have without the drain.
const MAX_DRAIN_BYTES: usize = 8 * 1024 * 1024;
/// Longest time spent reading them (a client sending slowly keeps no task for longer).
const MAX_DRAIN_TIME: Duration = Duration::from_secs(5);

/// Drains the body of a request refused before it was read (its head was enough to refuse
/// it). A client that asked `Expect: 100-continue` has sent nothing and sends nothing once
/// answered, so its body is left alone: reading it would ask for it.
pub async fn drain_unread(headers: &HeaderMap, body: Body) {
    let waits_to_send = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waits_to_send {
        drain(body).await;
    }
}

/// Reads and drops what is left of `body`, up to [`MAX_DRAIN_BYTES`] and [`MAX_DRAIN_TIME`].
pub async fn drain(mut body: Body) {
    if body.is_end_stream() {
        return;
    }
    let mut drained = 0;
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            drained += frame.data_ref().map_or(0, |d| d.len());
            if drained > MAX_DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(MAX_DRAIN_TIME, read).await;
}
