//! Reading a signal request's body within `--ingest-memory-mb`: the request's share grows to
//! the whole body once it outgrows its first share (see [`super::budget`]), and a body must keep arriving: no pause of
//! `--header-read-timeout`, no more than four of those in all, and at least
//! [`MIN_RATE`] bytes a second on average after [`RATE_GRACE`] (time spent waiting for the
//! share to grow is the server's and counts for neither). A client announcing a megabyte
//! and sending a byte now and then holds almost nothing, and not for long: what a
//! well-behaved tenant sends keeps being accepted while others misbehave.

use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::budget::{IngestBudget, Share};
use crate::problem::Problem;
use crate::signals::batch::MAX_REQUEST_BYTES;
use crate::stall::{StallTimer, Stalled};

/// How long a whole body may take to arrive, in pauses allowed (`--header-read-timeout`).
const BODY_TIME_IN_PAUSES: u32 = 4;
/// The slowest a body may arrive on average, once [`RATE_GRACE`] has passed.
pub const MIN_RATE: usize = 4 * 1024;
/// How long a body may take before [`MIN_RATE`] applies (a slow start, a TLS round trip).
pub const RATE_GRACE: Duration = Duration::from_secs(5);

/// Why a body was not read whole: the metric reason and the problem.
pub type Refused = (&'static str, Problem);

/// The whole body, and the share that now covers it. `declared` is its `Content-Length`: what
/// the share grows to at once when the body outgrows its first share (1 MiB without one).
pub async fn read(
    mut body: Body,
    budget: &IngestBudget,
    mut share: Share,
    declared: Option<usize>,
    pause: Duration,
) -> Result<(Bytes, Share), Refused> {
    let started = Instant::now();
    let whole = pause * BODY_TIME_IN_PAUSES;
    // Time spent waiting for the share to grow: the server's wait, not the client's slowness,
    // so neither the whole-body limit nor the rate counts it.
    let mut waited = Duration::ZERO;
    let mut stall = StallTimer::new(pause);
    let mut buf = BytesMut::new();
    // A body that comes in one piece is kept as it came, not copied.
    let mut first: Option<Bytes> = None;
    loop {
        let next = std::future::poll_fn(|cx| stall.poll_frame(&mut body, cx));
        let frame = match tokio::time::timeout_at(started + waited + whole, next).await {
            Err(_) => return Err(too_slow_whole(whole)),
            Ok(Err(Stalled)) => return Err(("timeout", Problem::body_stalled(pause))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(Err(e)))) => {
                return Err(("malformed", Problem::body_unreadable(&e)));
            }
            Ok(Ok(Some(Ok(frame)))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let held = first.as_ref().map_or(0, Bytes::len) + buf.len() + data.len();
        if held > MAX_REQUEST_BYTES {
            drop(share);
            crate::refused_body::drain(body).await;
            return Err(too_large());
        }
        if held > share.bytes() {
            let whole = declared.unwrap_or(MAX_REQUEST_BYTES).max(held);
            let asked = Instant::now();
            if !budget.grow(&mut share, whole, pause).await {
                drop(share);
                crate::refused_body::drain(body).await;
                return Err(overloaded());
            }
            waited += asked.elapsed();
        }
        if first.is_none() && buf.is_empty() {
            first = Some(data);
        } else {
            if let Some(first) = first.take() {
                buf.extend_from_slice(&first);
            }
            buf.extend_from_slice(&data);
        }
        let elapsed = started.elapsed().saturating_sub(waited);
        if elapsed > RATE_GRACE && (held as f64) < MIN_RATE as f64 * elapsed.as_secs_f64() {
            return Err((
                "timeout",
                Problem::request_timeout(format!(
                    "the request body arrives slower than {} KiB/s; send it faster, or in smaller batches",
                    MIN_RATE / 1024
                )),
            ));
        }
    }
    share.settle();
    Ok((first.unwrap_or_else(|| buf.freeze()), share))
}

/// 413 for a body over 1 MiB.
pub fn too_large() -> Refused {
    (
        "too_large",
        Problem::too_large(format!(
            "the request body is over {MAX_REQUEST_BYTES} bytes; send at most 1 MiB per request (split the batch)"
        )),
    )
}

/// 503 when no share of `--ingest-memory-mb` was had in time.
pub fn overloaded() -> Refused {
    (
        "overloaded",
        Problem::unavailable(
            1,
            "the server is ingesting as much as --ingest-memory-mb allows (one org at most half of it); retry shortly",
        ),
    )
}

fn too_slow_whole(whole: Duration) -> Refused {
    (
        "timeout",
        Problem::request_timeout(format!(
            "the request body did not arrive whole within {} s (4 x --header-read-timeout); send it faster, or in smaller batches",
            whole.as_secs()
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::budget::FIRST_SHARE;
    use prometheus_client::metrics::gauge::Gauge;

    const KIB: usize = 1024;

    /// 300 KiB sent at 20 KiB/s: well above the minimum rate while it is read.
    fn steady_body() -> Body {
        let chunks = futures_util::stream::unfold(0, |sent| async move {
            (sent < 15).then_some(())?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((
                Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 20 * KIB])),
                sent + 1,
            ))
        });
        Body::from_stream(chunks)
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_the_share_is_not_counted_as_slowness() {
        let budget = std::sync::Arc::new(IngestBudget::new(2 * 1024 * KIB, Gauge::default()));
        let wait = Duration::from_secs(30);
        // Another request of the org holds 900 KiB of its 1 MiB for 30 s.
        let mut other = budget.take(1, FIRST_SHARE, wait).await.unwrap();
        assert!(budget.grow(&mut other, 900 * KIB, wait).await);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(other);
        });
        let share = budget.take(1, FIRST_SHARE, wait).await.unwrap();
        // Past its first 64 KiB (4 s) the body waits 26 s for the rest of its share: 80 KiB in
        // 30 s would be under 4 KiB/s, but only its own 4 s count.
        let (bytes, share) = read(steady_body(), &budget, share, Some(300 * KIB), wait)
            .await
            .map_err(|(reason, problem)| format!("{reason}: {problem:?}"))
            .unwrap();
        assert_eq!(bytes.len(), 300 * KIB);
        assert_eq!(share.bytes(), 300 * KIB);
    }
}
