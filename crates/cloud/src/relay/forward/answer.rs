//! A bridge's answer while it is forwarded: counted as in flight on its tunnel instance, and
//! shared by the response body that streams it and the [`super::watch::Watch`] that may end it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::relay::Instance;

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

/// The bridge's answer, and its place in its instance's in-flight count; dropping it resets
/// the tunnel stream.
pub(super) struct Answer {
    pub(super) inner: hyper::body::Incoming,
    pub(super) _guard: InFlight,
}

/// An [`Answer`] shared by its body and its [`super::watch::Watch`], which may take it (`None`
/// then).
#[derive(Clone)]
pub(super) struct SharedAnswer(Arc<Mutex<Option<Answer>>>);

impl SharedAnswer {
    /// Shares `answer` between its body and its watch.
    pub(super) fn new(answer: Answer) -> Self {
        SharedAnswer(Arc::new(Mutex::new(Some(answer))))
    }

    /// The answer, or `None` once the watch took it; a poisoned lock still holds it.
    pub(super) fn lock(&self) -> MutexGuard<'_, Option<Answer>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
