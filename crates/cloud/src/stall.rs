//! A clock for bodies that stop flowing. It starts when a read finds nothing and restarts after
//! each read that finds something, so what it measures is one wait for the other side; data
//! that was already waiting when a slow reader comes back resets it (no false alarm).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

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

    /// The read produced something (or ended): the next wait starts a fresh clock.
    pub fn progressed(&mut self) {
        self.waiting = false;
    }

    /// The read is pending: starts the clock if it is not running, and says whether the
    /// pause has now lasted `limit` (`Ready`) or not yet (`Pending`, the waker registered).
    pub fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn trips_only_after_a_whole_pause() {
        let mut timer = StallTimer::new(Duration::from_secs(10));
        let pending = |t: &mut StallTimer| {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            t.poll_stalled(&mut cx).is_pending()
        };
        assert!(pending(&mut timer));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending(&mut timer));
        // Progress resets the clock: 6 s more is not a 10 s pause.
        timer.progressed();
        assert!(pending(&mut timer));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending(&mut timer));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!pending(&mut timer), "a whole 10 s pause did not trip");
    }
}
