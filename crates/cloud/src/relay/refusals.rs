//! The log of refused tunnels and enrollments: one warning each, with the peer, the bridge
//! name it gave and the reason, rate-limited so that a flood of bad connects cannot flood the
//! log.

use std::time::Duration;

use axum::http::HeaderMap;

use crate::auth::PeerAddr;

/// At most this many refusals are logged per [`REFUSAL_LOG_WINDOW`]; a flood of bad
/// connects must not flood the log.
const REFUSALS_LOGGED: u32 = 20;
/// The window of [`REFUSALS_LOGGED`].
const REFUSAL_LOG_WINDOW: Duration = Duration::from_secs(60);

/// Logs a refused tunnel or enrollment (`step`) at warn, with the peer, the bridge name it
/// gave and the reason, rate-limited; the first line after a window with suppressed refusals
/// says how many there were.
pub fn log_refusal(
    step: &'static str,
    peer: Option<PeerAddr>,
    headers: &HeaderMap,
    status: u16,
    why: &str,
) {
    static WINDOW: std::sync::Mutex<Option<(std::time::Instant, u32, u64)>> =
        std::sync::Mutex::new(None);
    let mut window = WINDOW.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    let (started, logged, suppressed) = window.get_or_insert((now, 0, 0));
    if now.duration_since(*started) > REFUSAL_LOG_WINDOW {
        (*started, *logged) = (now, 0);
    }
    if *logged >= REFUSALS_LOGGED {
        *suppressed += 1;
        return;
    }
    *logged += 1;
    let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.0.to_string());
    let earlier = std::mem::take(suppressed);
    let bridge = headers
        .get(tunnel::HEADER_NAME)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::warn!(step, peer = %peer, bridge, status, reason = %why, suppressed_before = earlier, "bridge tunnel refused");
}
