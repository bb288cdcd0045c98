//! A clock for bodies that stop flowing. It starts when a read finds nothing and restarts after
//! each read that finds something, so what it measures is one wait for the other side; data
//! that was already waiting when a slow reader comes back resets it (no false alarm).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame};
use tokio::time::{Instant, Sleep};

/// A body read that waited a whole `limit` without anything arriving.
#[derive(Debug)]
pub struct Stalled;

/// What one read of a body `B` gives: what the body gave (a frame, its end, its error), or
/// [`Stalled`].
pub type Read<B> = Result<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>, Stalled>;

/// Trips when one wait for the next piece of a body lasts `limit`.
pub struct StallTimer {
    limit: Duration,
    /// Made on the first pending read only: bodies that are always ready never allocate it.
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl StallTimer {
    /// A timer allowing pauses of up to `limit`.
    pub fn new(limit: Duration) -> Self {
        StallTimer {
            limit,
            sleep: None,
            waiting: false,
        }
    }

    /// The pause allowed.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Polls `body` for its next frame, or `Err(Stalled)` once one wait for it has lasted
    /// `limit`.
    pub fn poll_frame<B: Body + Unpin>(
        &mut self,
        body: &mut B,
        cx: &mut Context<'_>,
    ) -> Poll<Read<B>> {
        match Pin::new(body).poll_frame(cx) {
            Poll::Ready(frame) => {
                self.waiting = false;
                Poll::Ready(Ok(frame))
            }
            Poll::Pending => self.poll_stalled(cx).map(|()| Err(Stalled)),
        }
    }

    /// The read is pending: starts the clock if it is not running, and says whether the
    /// pause has now lasted `limit` (`Ready`) or not yet (`Pending`, the waker registered).
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = Instant::now() + self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.waiting {
            sleep.as_mut().reset(deadline);
            self.waiting = true;
        }
        sleep.as_mut().poll(cx)
    }
}

/// Why [`read_whole`] gave up on a body.
#[derive(Debug)]
pub enum ReadError<E> {
    /// It is longer than the limit (reading stopped there; the rest is still unread).
    TooLarge,
    /// One wait for its next piece lasted the pause limit.
    Stalled,
    /// The body itself failed (the connection broke, say).
    Body(E),
}

/// Reads a whole body of at most `max` bytes, never buffering more, under the same pause rule
/// as [`StallTimer`]: for request bodies that must be held whole (a signal to parse, a small
/// forwarded upload kept to be sent again).
pub async fn read_whole<B>(
    body: &mut B,
    max: usize,
    pause: Duration,
) -> Result<bytes::Bytes, ReadError<B::Error>>
where
    B: Body<Data = bytes::Bytes> + Unpin,
{
    let mut buf = bytes::BytesMut::new();
    // A body that comes in one piece is kept as it came, not copied.
    let mut first: Option<bytes::Bytes> = None;
    let mut stall = StallTimer::new(pause);
    loop {
        let frame = match std::future::poll_fn(|cx| stall.poll_frame(body, cx)).await {
            Ok(Some(frame)) => frame.map_err(ReadError::Body)?,
            Ok(None) => return Ok(first.unwrap_or_else(|| buf.freeze())),
            Err(Stalled) => return Err(ReadError::Stalled),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let held = first.as_ref().map_or(0, bytes::Bytes::len) + buf.len();
        if held + data.len() > max {
            return Err(ReadError::TooLarge);
        }
        if held == 0 {
            first = Some(data);
        } else {
            if let Some(first) = first.take() {
                buf.extend_from_slice(&first);
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// The largest form or JSON document the routes behind [`whole_body`] take (axum's own
/// default limit for them).
pub const WHOLE_BODY: usize = 2 * 1024 * 1024;

/// Middleware for routes whose handlers read small bodies whole (the dashboard's forms,
/// correlation's JSON): reads the body first, so that a client that stops sending for `pause`
/// (`--header-read-timeout`) mid-body, or is still sending after four times that, gets a 408
/// instead of holding a connection; a body over [`WHOLE_BODY`] gets a 413 (at once when its
/// `Content-Length` says so), and one that would take the bodies in memory past their budget
/// ([`crate::body_budget`]) a 503 with `Retry-After: 1`.
pub async fn whole_body(
    axum::extract::State(pause): axum::extract::State<Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let too_large = || {
        crate::problem::Problem::too_large(format!(
            "the request body is over {} MiB; these routes take a form or a JSON document up to that size",
            WHOLE_BODY / (1024 * 1024)
        ))
        .into_response()
    };
    let content_length = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if content_length.is_some_and(|n| n > WHOLE_BODY as u64) {
        // Read and dropped first, or an HTTP/2 client sees a reset instead of the 413.
        let (parts, body) = request.into_parts();
        crate::refused_body::drain_unread(&parts.headers, body).await;
        return too_large();
    }
    // Held until the handler is done with the body; a request without one (a GET) takes none.
    let empty = axum::body::HttpBody::size_hint(request.body()).exact() == Some(0);
    let peer = request
        .extensions()
        .get::<crate::auth::PeerAddr>()
        .map(|p| p.0.ip());
    let bytes = content_length.map_or(WHOLE_BODY, |n| n as usize);
    let held = if empty {
        None
    } else {
        let Some(reservation) = crate::body_budget::FORMS.reserve(peer, bytes) else {
            return crate::problem::Problem::unavailable(
                1,
                "the service is reading too many request bodies at once; retry in a second",
            )
            .into_response();
        };
        Some(reservation)
    };
    let (parts, mut body) = request.into_parts();
    let whole = pause * 4;
    let Ok(read) = tokio::time::timeout(whole, read_whole(&mut body, WHOLE_BODY, pause)).await
    else {
        return crate::problem::Problem::request_timeout(format!(
            "the request body did not arrive whole within {} s (4 x --header-read-timeout); send it faster",
            whole.as_secs()
        ))
        .into_response();
    };
    match read {
        Ok(bytes) => {
            let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            next.run(request).await
        }
        Err(ReadError::Stalled) => crate::problem::Problem::body_stalled(pause).into_response(),
        Err(ReadError::TooLarge) => {
            // The share goes back first: draining reads nothing into memory.
            drop(held);
            crate::refused_body::drain(body).await;
            too_large()
        }
        Err(ReadError::Body(e)) => {
            crate::problem::Problem::bad_request(format!("cannot read the request body: {e}"))
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body whose next frame is ready only when `ready` is set.
    struct Gate {
        ready: bool,
    }

    impl Body for Gate {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
            if std::mem::take(&mut self.ready) {
                Poll::Ready(Some(Ok(Frame::data(bytes::Bytes::from_static(b"x")))))
            } else {
                Poll::Pending
            }
        }
    }

    /// A body of ready frames.
    struct Frames(std::collections::VecDeque<&'static [u8]>);

    impl Body for Frames {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<bytes::Bytes>, Self::Error>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|d| Ok(Frame::data(bytes::Bytes::from_static(d)))),
            )
        }
    }

    #[tokio::test]
    async fn whole_bodies_in_one_piece_or_many_and_never_past_the_limit() {
        let pause = Duration::from_secs(1);
        let read = |frames: &[&'static [u8]], max| {
            let mut body = Frames(frames.iter().copied().collect());
            async move { read_whole(&mut body, max, pause).await }
        };
        let one: &'static [u8] = b"{\"a\":1}";
        let whole = read(&[one], 64).await.unwrap();
        assert_eq!(whole, one);
        assert_eq!(whole.as_ptr(), one.as_ptr(), "one piece is not copied");
        assert_eq!(read(&[b"ab", b"", b"cd", b"e"], 5).await.unwrap(), "abcde");
        assert!(matches!(
            read(&[b"abc", b"def"], 5).await,
            Err(ReadError::TooLarge)
        ));
        assert!(matches!(
            read(&[b"abcdef"], 5).await,
            Err(ReadError::TooLarge)
        ));
        assert_eq!(read(&[], 5).await.unwrap(), "");
    }

    #[tokio::test(start_paused = true)]
    async fn a_form_that_trickles_without_pausing_is_refused_for_its_whole_time() {
        use tower::ServiceExt;
        let pause = Duration::from_secs(1);
        let app = axum::Router::new()
            .route("/", axum::routing::post(|| async { "read" }))
            .layer(axum::middleware::from_fn_with_state(pause, whole_body));
        let trickle = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Some((Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"a")), ()))
        });
        let request = axum::http::Request::post("/")
            .body(axum::body::Body::from_stream(trickle))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::REQUEST_TIMEOUT);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("did not arrive whole within 4 s"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn trips_only_after_a_whole_pause() {
        let mut timer = StallTimer::new(Duration::from_secs(10));
        let mut body = Gate { ready: false };
        let poll = |timer: &mut StallTimer, body: &mut Gate| {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            match timer.poll_frame(body, &mut cx) {
                Poll::Pending => "waiting",
                Poll::Ready(Ok(_)) => "frame",
                Poll::Ready(Err(Stalled)) => "stalled",
            }
        };
        assert_eq!(poll(&mut timer, &mut body), "waiting");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(poll(&mut timer, &mut body), "waiting");
        // A frame resets the clock: 6 s more is not a 10 s pause.
        body.ready = true;
        assert_eq!(poll(&mut timer, &mut body), "frame");
        assert_eq!(poll(&mut timer, &mut body), "waiting");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(poll(&mut timer, &mut body), "waiting");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(poll(&mut timer, &mut body), "stalled");
    }
}
