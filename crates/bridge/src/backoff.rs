//! Reconnect back-off (docs/bridge.md, "Tunnel protocol" item 6).
//!
//! Exponential from `reconnect_delay`, doubling up to [`MAX_DELAY`], with full jitter: each
//! wait is random in `[0, ceiling]`, so many bridges cut off at once do not return in step.
//! The ceiling stays at `reconnect_delay` for the first attempts, until their waits add up to
//! [`PATIENCE`]: a cloud that restarts (an upgrade) in less than that is reached again within
//! `reconnect_delay` of its return. It falls back to `reconnect_delay` once a connection has
//! stayed up for [`RESET_AFTER`]. A rejected token (401/403) will not fix itself, so it waits between half
//! the cap and the cap every time. This module only computes delays; the caller sleeps.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The largest ceiling of the exponential back-off (unless `reconnect_delay` is larger).
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// A connection that stayed up this long resets the back-off.
pub const RESET_AFTER: Duration = Duration::from_secs(60);
/// How long the attempts after a reset wait in all at `reconnect_delay` before the ceiling
/// starts doubling.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Why the last connection attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Network, TLS, proxy or server trouble: retry with exponential back-off.
    Transient,
    /// The cloud rejected the token (401/403): retry slowly.
    Rejected,
}

/// Reconnect delays for one bridge instance.
#[derive(Debug, Clone)]
pub struct Backoff<R = StdRng> {
    initial: Duration,
    cap: Duration,
    ceiling: Duration,
    /// What is left of [`PATIENCE`] before the ceiling doubles.
    patience: Duration,
    rng: R,
}

impl Backoff<StdRng> {
    /// Back-off starting at `initial` (the configured `reconnect_delay`), seeded from the OS.
    pub fn new(initial: Duration) -> Self {
        Self::with_rng(initial, StdRng::from_os_rng())
    }
}

impl<R: Rng> Backoff<R> {
    /// Back-off starting at `initial`, drawing jitter from `rng` (tests pass a fixed one).
    /// A zero `initial` is raised to one millisecond so that doubling makes progress.
    pub fn with_rng(initial: Duration, rng: R) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self {
            initial,
            cap: MAX_DELAY.max(initial),
            ceiling: initial,
            patience: PATIENCE,
            rng,
        }
    }

    /// How long to wait before the next attempt, after an attempt failed with `failure`.
    pub fn next_delay(&mut self, failure: Failure) -> Duration {
        match failure {
            Failure::Transient => {
                let delay = self.jitter(Duration::ZERO, self.ceiling);
                if self.patience.is_zero() {
                    self.ceiling = (self.ceiling * 2).min(self.cap);
                } else {
                    self.patience = self.patience.saturating_sub(delay);
                }
                delay
            }
            Failure::Rejected => {
                self.ceiling = self.cap;
                self.jitter(self.cap / 2, self.cap)
            }
        }
    }

    /// Records that a connection ended after `uptime`; resets the back-off when it stayed up
    /// for at least [`RESET_AFTER`].
    pub fn connection_ended(&mut self, uptime: Duration) {
        if uptime >= RESET_AFTER {
            self.reset();
        }
    }

    /// Starts over from the initial delay.
    pub fn reset(&mut self) {
        self.ceiling = self.initial;
        self.patience = PATIENCE;
    }

    /// The upper bound of the next transient delay.
    pub fn ceiling(&self) -> Duration {
        self.ceiling
    }

    /// A random duration in `[low, high]`.
    fn jitter(&mut self, low: Duration, high: Duration) -> Duration {
        let unit: f64 = self.rng.random();
        low + (high - low).mul_f64(unit)
    }
}

#[cfg(test)]
mod tests {
    use rand::RngCore;

    use super::*;

    /// An RNG that always yields the same word: 0 gives the lowest delay, `u64::MAX` the
    /// highest.
    struct Fixed(u64);

    impl RngCore for Fixed {
        fn next_u32(&mut self) -> u32 {
            self.0 as u32
        }
        fn next_u64(&mut self) -> u64 {
            self.0
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            dest.fill(self.0 as u8);
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    fn ceilings(backoff: &mut Backoff<impl Rng>, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let ceiling = backoff.ceiling().as_secs();
                backoff.next_delay(Failure::Transient);
                ceiling
            })
            .collect()
    }

    #[test]
    fn doubles_from_the_initial_delay_to_the_cap() {
        let mut backoff = Backoff::with_rng(5 * SECOND, Fixed(u64::MAX));
        assert_eq!(
            ceilings(&mut backoff, 12),
            [5, 5, 5, 5, 5, 5, 5, 10, 20, 40, 60, 60]
        );
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let mut low = Backoff::with_rng(5 * SECOND, Fixed(0));
        assert_eq!(low.next_delay(Failure::Transient), Duration::ZERO);
        let mut high = Backoff::with_rng(5 * SECOND, Fixed(u64::MAX));
        let delay = high.next_delay(Failure::Transient);
        assert!(delay <= 5 * SECOND && delay > 5 * SECOND - Duration::from_millis(1));

        let mut seeded = Backoff::with_rng(SECOND, StdRng::seed_from_u64(7));
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..50 {
            let ceiling = seeded.ceiling();
            let delay = seeded.next_delay(Failure::Transient);
            assert!(delay <= ceiling, "{delay:?} > {ceiling:?}");
            distinct.insert(delay);
        }
        assert!(distinct.len() > 40, "jitter should vary");
    }

    #[test]
    fn a_minute_of_uptime_resets() {
        let mut backoff = Backoff::with_rng(5 * SECOND, Fixed(u64::MAX));
        ceilings(&mut backoff, 9);
        backoff.connection_ended(59 * SECOND);
        assert_eq!(backoff.ceiling(), 40 * SECOND);
        backoff.connection_ended(RESET_AFTER);
        assert_eq!(ceilings(&mut backoff, 8), [5, 5, 5, 5, 5, 5, 5, 10]);
    }

    #[test]
    fn rejected_tokens_retry_slowly() {
        let mut low = Backoff::with_rng(5 * SECOND, Fixed(0));
        assert_eq!(low.next_delay(Failure::Rejected), 30 * SECOND);
        assert_eq!(low.ceiling(), MAX_DELAY);
        let mut high = Backoff::with_rng(5 * SECOND, Fixed(u64::MAX));
        let delay = high.next_delay(Failure::Rejected);
        assert!(delay > 59 * SECOND && delay <= MAX_DELAY);
    }

    #[test]
    fn a_long_initial_delay_raises_the_cap() {
        let mut backoff = Backoff::with_rng(90 * SECOND, Fixed(0));
        assert_eq!(ceilings(&mut backoff, 2), [90, 90]);
        let mut tiny = Backoff::with_rng(Duration::ZERO, Fixed(u64::MAX));
        for _ in 0..=PATIENCE.as_millis() {
            tiny.next_delay(Failure::Transient);
        }
        assert_eq!(tiny.ceiling(), Duration::from_millis(2));
    }

    #[test]
    fn the_default_rng_works() {
        let mut backoff = Backoff::new(SECOND);
        assert!(backoff.next_delay(Failure::Transient) <= SECOND);
    }
}
