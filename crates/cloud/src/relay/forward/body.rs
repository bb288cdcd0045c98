//! The bodies of a forwarded exchange: the caller's upload as it goes into the tunnel
//! ([`Announced`]) and the bridge's answer as it goes back ([`Tracked`]), each cut when it
//! stops moving, and the [`InFlight`] count that picks the least busy instance.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::relay::Instance;
use crate::stall::{StallTimer, Stalled};

/// A request body that says when it has been sent whole (or given up), so that the
/// `--forward-timeout` starts only then; and that fails (resetting the tunnel stream, so the
/// bridge frees its slot) when the caller pauses mid-upload for `--header-read-timeout`.
pub(super) struct Announced {
    pub(super) inner: Body,
    pub(super) done: Option<tokio::sync::oneshot::Sender<()>>,
    pub(super) stall: StallTimer,
    pub(super) stalled: Arc<AtomicBool>,
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

/// Counts a stream as in flight on its instance until the response body is done.
pub(super) struct InFlight(Arc<Instance>);

impl InFlight {
    pub(super) fn new(instance: Arc<Instance>) -> Self {
        instance.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(instance)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds its [`InFlight`] guard until it ends, and fails when the bridge
/// sends nothing for `--forward-timeout` while the caller waits for more (a hung internal
/// system would otherwise hold the caller's connection forever). Dropping it resets the
/// tunnel stream.
pub(super) struct Tracked {
    pub(super) inner: hyper::body::Incoming,
    pub(super) _guard: InFlight,
    pub(super) stall: StallTimer,
    /// Ends the answer when the caller's API key is revoked while it streams.
    pub(super) key: KeyWatch,
}

/// How often a long answer's API key is checked again: a revoked key ends the answers it is
/// still receiving within seconds (as it ends its database sessions), not only new requests.
const KEY_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// The revocation check of one answer: started only once the answer has lasted
/// [`KEY_RECHECK`] (most answers end long before), then repeated every [`KEY_RECHECK`] by a
/// task that ends with the answer.
pub(super) struct KeyWatch {
    state: crate::relay::RelayState,
    principal: Arc<crate::auth::Principal>,
    started: std::time::Instant,
    /// Made with the checks: whether the key was found revoked, and the body's waker.
    checks: Option<Checks>,
}

/// The checking task of a [`KeyWatch`] and what it tells the body.
struct Checks {
    task: tokio::task::JoinHandle<()>,
    found: Arc<(AtomicBool, futures_util::task::AtomicWaker)>,
}

impl KeyWatch {
    pub(super) fn new(
        state: &crate::relay::RelayState,
        principal: &Arc<crate::auth::Principal>,
    ) -> Self {
        KeyWatch {
            state: state.clone(),
            principal: principal.clone(),
            started: std::time::Instant::now(),
            checks: None,
        }
    }

    /// Whether the key was found revoked; starts the checks once the answer is long enough.
    fn revoked(&mut self, cx: &Context<'_>) -> bool {
        if let Some(checks) = &self.checks {
            checks.found.1.register(cx.waker());
            return checks.found.0.load(Ordering::Relaxed);
        }
        if self.started.elapsed() >= KEY_RECHECK {
            let found: Arc<(AtomicBool, futures_util::task::AtomicWaker)> = Arc::default();
            found.1.register(cx.waker());
            let (state, principal, told) =
                (self.state.clone(), self.principal.clone(), found.clone());
            let task = tokio::spawn(async move {
                while state.keys.is_live(&state.store, &principal).await {
                    tokio::time::sleep(KEY_RECHECK).await;
                }
                told.0.store(true, Ordering::Relaxed);
                told.1.wake();
            });
            self.checks = Some(Checks { task, found });
        }
        false
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        if let Some(checks) = self.checks.take() {
            checks.task.abort();
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
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.key.revoked(cx) {
            tracing::info!(principal = %this.key.principal.key_id, "API key revoked; cutting the answer it was receiving");
            return Poll::Ready(Some(Err(Cut::Revoked.into())));
        }
        Poll::Ready(match ready!(this.stall.poll_frame(&mut this.inner, cx)) {
            Ok(frame) => frame.map(|f| f.map_err(Into::into)),
            Err(Stalled) => {
                tracing::warn!(stall = ?this.stall.limit(), "forwarded response stalled; resetting its stream");
                Some(Err(Cut::Response(this.stall.limit()).into()))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
