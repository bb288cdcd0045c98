//! Sign-in throttling: after [`MAX_FAILURES`] failed sign-ins within [`WINDOW`] for one
//! account, or from one address, further attempts are refused until the window passes, so a
//! password cannot be guessed online. Kept in memory (bounded): a restart forgets it, which
//! costs an attacker a restart they cannot cause.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed per account and per address within [`WINDOW`].
pub const MAX_FAILURES: usize = 5;
/// How long failures count.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most accounts and addresses tracked; a full table drops its oldest entries.
const MAX_TRACKED: usize = 10_000;

/// What is counted: an account (lowercase email) or an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Account(String),
    Address(IpAddr),
}

/// The failure counters.
#[derive(Default)]
pub struct Throttle {
    failures: Mutex<HashMap<Key, Vec<Instant>>>,
}

impl Throttle {
    /// `Some(wait)` when `email` or `address` has used up its failures.
    pub fn blocked(&self, email: &str, address: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait = None;
        for key in keys(email, address) {
            if let Some(times) = map.get_mut(&key) {
                times.retain(|t| now.duration_since(*t) < WINDOW);
                if times.len() >= MAX_FAILURES {
                    let until = WINDOW.saturating_sub(now.duration_since(times[0]));
                    wait = Some(wait.map_or(until, |w: Duration| w.max(until)));
                }
            }
        }
        wait
    }

    /// Counts a failed sign-in against both.
    pub fn failed(&self, email: &str, address: Option<IpAddr>) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_TRACKED {
            map.retain(|_, times| {
                times
                    .last()
                    .is_some_and(|t| now.duration_since(*t) < WINDOW)
            });
        }
        for key in keys(email, address) {
            let times = map.entry(key).or_default();
            times.push(now);
            if times.len() > MAX_FAILURES {
                times.remove(0);
            }
        }
    }

    /// Forgets an account's failures after it signed in.
    pub fn succeeded(&self, email: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&Key::Account(email.to_string()));
    }
}

fn keys(email: &str, address: Option<IpAddr>) -> Vec<Key> {
    let mut keys = vec![Key::Account(email.to_string())];
    keys.extend(address.map(Key::Address));
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_block_the_account_and_the_address() {
        let t = Throttle::default();
        let home: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            assert!(t.blocked("ada@example.com", Some(home)).is_none());
            t.failed("ada@example.com", Some(home));
        }
        assert!(t.blocked("ada@example.com", None).is_some());
        // The same address, another account: blocked too.
        assert!(t.blocked("bob@example.com", Some(home)).is_some());
        // The account from elsewhere: still blocked; another account elsewhere: free.
        let away: IpAddr = "198.51.100.7".parse().unwrap();
        assert!(t.blocked("ada@example.com", Some(away)).is_some());
        assert!(t.blocked("bob@example.com", Some(away)).is_none());
    }
}
