//! The bodies of a forwarded exchange: the caller's upload as it goes into the tunnel
//! ([`Announced`]) and the bridge's answer as it goes back ([`Tracked`]), each cut when it
//! stops moving (an answer also when its caller stops reading it: [`Watch`]). The answer
//! itself, and its place in the count that picks the least busy instance, are
//! [`super::answer`]'s.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::answer::{Answer, SharedAnswer};
use super::watch::Watch;
use crate::stall::{StallTimer, Stalled};

/// A request body that says when it has been sent whole (or given up), so that the
/// `--forward-timeout` starts only then; and that fails (resetting the tunnel stream, so the
/// bridge frees its slot) when the caller pauses mid-upload for `--header-read-timeout`.
pub(super) struct Announced {
    pub(super) inner: Body,
    pub(super) done: Option<tokio::sync::oneshot::Sender<()>>,
    pub(super) stall: StallTimer,
    pub(super) stalled: Arc<AtomicBool>,
    /// Why the caller's body could not be read (a malformed chunk, a connection closed before
    /// the body's end): the caller's fault, which the tunnel must not be blamed for.
    pub(super) broken: Arc<OnceLock<String>>,
    /// Pieces sent so far: the forward's watchdog sees whether the upload still moves.
    pub(super) moved: Arc<AtomicU64>,
}

impl HttpBody for Announced {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let polled = match ready!(this.stall.poll_frame(&mut this.inner, cx)) {
            Ok(frame) => {
                if let Some(Err(e)) = &frame {
                    let _ = this.broken.set(e.to_string());
                }
                this.moved.fetch_add(1, Ordering::Relaxed);
                frame.map(|f| f.map_err(Into::into))
            }
            Err(Stalled) => {
                this.stalled.store(true, Ordering::Relaxed);
                Some(Err(Cut::Upload(this.stall.limit()).into()))
            }
        };
        if matches!(polled, None | Some(Err(_)))
            && let Some(done) = this.done.take()
        {
            let _ = done.send(());
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

/// The longest answer watched only once it has lasted a while, so that most answers spawn no
/// task: the bridge is done with one this short even if its caller never reads it, and what
/// it keeps of the tunnel's 64 MiB connection window is small (the bridge's `max_connections`
/// streams of it at most).
pub(super) const SHORT_ANSWER: u64 = 64 * 1024;

/// A response body that holds its [`Answer`] until it ends, and fails when the bridge sends
/// nothing for `--forward-timeout` while the caller waits for more (a hung internal system
/// would otherwise hold the caller's connection forever). A long answer is also watched
/// ([`Watch`]): it ends when its API key is revoked or when its caller leaves it unread.
pub(super) struct Tracked {
    /// Shared with the watch, which drops it when the caller leaves it unread.
    answer: SharedAnswer,
    stall: StallTimer,
    watch: Watch,
}

impl Tracked {
    /// The body of `answer`, watched by `watch`, cut after `--forward-timeout` (`stall`)
    /// without data from the bridge.
    pub(super) fn new(answer: Answer, stall: StallTimer, mut watch: Watch) -> Self {
        let short = answer
            .inner
            .size_hint()
            .exact()
            .is_some_and(|n| n <= SHORT_ANSWER);
        let answer = SharedAnswer::new(answer);
        if !short {
            watch.start(&answer);
        }
        Tracked {
            answer,
            stall,
            watch,
        }
    }
}

/// Why a forwarded body was cut.
#[derive(Debug, thiserror::Error)]
enum Cut {
    /// The bridge went silent mid-response.
    #[error("the bridge sent no response data for {0:?} (--forward-timeout); the stream was reset")]
    Response(std::time::Duration),
    /// The caller went silent mid-upload.
    #[error("the request body stopped arriving for {0:?} (--header-read-timeout)")]
    Upload(std::time::Duration),
    /// The caller's API key was revoked while the answer streamed.
    #[error("the API key of this request was revoked; the answer was cut")]
    Revoked,
    /// The caller left the answer unread; its tunnel stream was reset meanwhile.
    #[error(
        "the caller read nothing of the answer for {0:?} (--forward-timeout); its stream was reset"
    )]
    Unread(std::time::Duration),
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.watch.asked(cx, &this.answer) {
            return Poll::Ready(Some(Err(Cut::Revoked.into())));
        }
        let mut answer = this.answer.lock();
        let Some(answer) = answer.as_mut() else {
            if this.watch.revoked() {
                return Poll::Ready(Some(Err(Cut::Revoked.into())));
            }
            return Poll::Ready(Some(Err(Cut::Unread(this.watch.unread_limit()).into())));
        };
        Poll::Ready(match ready!(this.stall.poll_frame(&mut answer.inner, cx)) {
            Ok(Some(Ok(frame))) => match frame.into_trailers() {
                Ok(mut trailers) => {
                    super::headers::trailer_filter(&mut trailers);
                    Some(Ok(Frame::trailers(trailers)))
                }
                Err(frame) => {
                    if frame.is_data() {
                        this.watch.handed();
                    }
                    Some(Ok(frame))
                }
            },
            Ok(frame) => frame.map(|f| f.map_err(Into::into)),
            Err(Stalled) => {
                tracing::warn!(stall = ?this.stall.limit(), "forwarded response stalled; resetting its stream");
                Some(Err(Cut::Response(this.stall.limit()).into()))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.answer
            .lock()
            .as_ref()
            .is_some_and(|a| a.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.answer
            .lock()
            .as_ref()
            .map_or_else(SizeHint::default, |a| a.inner.size_hint())
    }
}
