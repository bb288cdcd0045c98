//! A token bucket per signal key: `rate` events per second, bursts up to twice that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// Rate limiter keyed by signal key. A rate of 0 turns it off.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `rate` events per second per key, burst `2 × rate`; `0` means unlimited.
    pub fn new(rate: u32) -> Self {
        RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(rate) * 2.0,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `n` tokens for `key`; on refusal returns how long to wait before retrying.
    pub fn check(&self, key: &str, n: usize) -> Result<(), Duration> {
        self.check_at(key, n, Instant::now())
    }

    fn check_at(&self, key: &str, n: usize, now: Instant) -> Result<(), Duration> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(key) {
            buckets.insert(
                key.to_string(),
                Bucket {
                    tokens: self.burst,
                    refilled: now,
                },
            );
        }
        let Some(bucket) = buckets.get_mut(key) else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.refilled = now;
        let need = n as f64;
        // A batch larger than the burst passes once the bucket is full, leaving it in debt, so
        // small limits never refuse a batch forever and the average rate still holds.
        let threshold = need.min(self.burst);
        if bucket.tokens >= threshold {
            bucket.tokens -= need;
            Ok(())
        } else {
            let wait = (threshold - bucket.tokens) / self.rate;
            Err(Duration::from_secs_f64(wait.max(0.001)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let rl = RateLimiter::new(10);
        let t0 = Instant::now();
        assert!(rl.check_at("k", 20, t0).is_ok());
        let wait = rl.check_at("k", 1, t0).unwrap_err();
        assert!(wait <= Duration::from_millis(101), "{wait:?}");
        assert!(rl.check_at("other", 1, t0).is_ok(), "keys are independent");
        assert!(rl.check_at("k", 5, t0 + Duration::from_millis(500)).is_ok());
    }

    #[test]
    fn a_batch_above_the_burst_passes_once_then_waits_for_the_debt() {
        let rl = RateLimiter::new(10);
        let t0 = Instant::now();
        assert!(
            rl.check_at("k", 500, t0).is_ok(),
            "a full bucket lets a big batch through"
        );
        let wait = rl
            .check_at("k", 1, t0 + Duration::from_secs(1))
            .unwrap_err();
        assert!(wait > Duration::from_secs(40), "{wait:?}");
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let rl = RateLimiter::new(0);
        for _ in 0..10 {
            assert!(rl.check("k", 10_000).is_ok());
        }
    }
}
