//! The watcher of a long answer: a task, started with an answer that may be long (of unknown
//! length, or over [`super::body::SHORT_ANSWER`]) or once another has streamed for [`RECHECK`]
//! (most end long before), that every [`RECHECK`] checks two things the body cannot see for
//! itself while nobody asks it for more:
//!
//! - the caller's API key is still live: a revoked key ends the answers it is still receiving
//!   within seconds (as it ends its database sessions), not only new requests;
//! - the caller still reads: an answer left unread for `--forward-timeout` (the caller's
//!   connection stopped taking bytes) is dropped, which resets its tunnel stream, so the
//!   bridge frees its slot and its connection to the internal system. Without it, a caller
//!   that stops reading a large answer held them until it disconnected.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Context;
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;

use super::answer::SharedAnswer;
use crate::auth::Principal;
use crate::relay::RelayState;

/// How long an answer streams before it is watched, and how often it is checked then.
const RECHECK: Duration = Duration::from_secs(2);

/// Marks an answer whose body was asked for its next piece since it handed the last one on.
const ASKED: u64 = u64::MAX;

/// The watch of one answer (see the module's doc).
pub(super) struct Watch {
    state: RelayState,
    principal: Arc<Principal>,
    started: Instant,
    /// Made with the checking task.
    checks: Option<Checks>,
}

/// The checking task of a [`Watch`] and what it tells the body.
struct Checks {
    task: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
}

/// What the checking task and the body share.
#[derive(Default)]
struct Shared {
    revoked: AtomicBool,
    /// The body's waker, woken when the key is found revoked.
    waker: AtomicWaker,
    /// Milliseconds after the start at which the body handed its last piece on, or [`ASKED`]
    /// once it has been asked for the next one.
    handed: AtomicU64,
}

impl Watch {
    /// The watch of an answer to `principal`, starting now.
    pub(super) fn new(state: &RelayState, principal: &Arc<Principal>) -> Self {
        Watch {
            state: state.clone(),
            principal: principal.clone(),
            started: Instant::now(),
            checks: None,
        }
    }

    /// Called as the body is asked for its next piece: whether the key was found revoked (the
    /// answer must end); starts the checks once the answer has lasted [`RECHECK`].
    pub(super) fn asked(&mut self, cx: &Context<'_>, answer: &SharedAnswer) -> bool {
        if let Some(checks) = &self.checks {
            checks.shared.handed.store(ASKED, Ordering::Relaxed);
            checks.shared.waker.register(cx.waker());
            if checks.shared.revoked.load(Ordering::Relaxed) {
                tracing::info!(principal = %self.principal.key_id, "API key revoked; cutting the answer it was receiving");
                return true;
            }
            return false;
        }
        if self.started.elapsed() >= RECHECK {
            self.start(answer);
            return self.asked(cx, answer);
        }
        false
    }

    /// Starts the checks now: for an answer that may be long, whose caller could stop reading
    /// before the body is next asked for a piece.
    pub(super) fn start(&mut self, answer: &SharedAnswer) {
        let shared = Arc::new(Shared {
            handed: AtomicU64::new(ASKED),
            ..Shared::default()
        });
        let task = tokio::spawn(check(
            self.state.clone(),
            self.principal.clone(),
            (self.started, shared.clone()),
            answer.clone(),
        ));
        self.checks = Some(Checks { task, shared });
    }

    /// Called as the body hands a piece on: the caller's turn to read.
    pub(super) fn handed(&self) {
        if let Some(checks) = &self.checks {
            let at = self.started.elapsed().as_millis() as u64;
            checks.shared.handed.store(at, Ordering::Relaxed);
        }
    }

    /// Whether the key was found revoked (the watch then dropped the answer too).
    pub(super) fn revoked(&self) -> bool {
        self.checks
            .as_ref()
            .is_some_and(|c| c.shared.revoked.load(Ordering::Relaxed))
    }

    /// How long a caller may leave its answer unread.
    pub(super) fn unread_limit(&self) -> Duration {
        self.state.forward_timeout
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(checks) = self.checks.take() {
            checks.task.abort();
        }
    }
}

/// The checking task: ends when the key is revoked (telling the body) or when the answer was
/// left unread for `--forward-timeout` (dropping it).
async fn check(
    state: RelayState,
    principal: Arc<Principal>,
    (started, shared): (Instant, Arc<Shared>),
    answer: SharedAnswer,
) {
    let limit = state.forward_timeout.as_millis() as u64;
    loop {
        tokio::time::sleep(RECHECK).await;
        if !state.keys.is_live(&state.store, &principal).await {
            shared.revoked.store(true, Ordering::Relaxed);
            shared.waker.wake();
            // A caller that is not reading would never see the flag: its stream goes now.
            drop(answer.lock().take());
            return;
        }
        // Read again under the lock: a poll that came meanwhile keeps the answer.
        let mut held = answer.lock();
        let handed = shared.handed.load(Ordering::Relaxed);
        let now = started.elapsed().as_millis() as u64;
        if handed != ASKED && now.saturating_sub(handed) >= limit {
            if held.take().is_some() {
                tracing::warn!(principal = %principal.key_id, timeout = ?state.forward_timeout, "the caller read nothing of its answer for --forward-timeout; its tunnel stream was reset");
            }
            return;
        }
        drop(held);
    }
}
