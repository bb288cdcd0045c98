//! Sign-in throttling: after [`ADDRESS_FAILURES`] failed sign-ins within [`WINDOW`] from one
//! address, or [`ACCOUNT_FAILURES`] for one account from any, further attempts are refused
//! until the window passes, so a password cannot be guessed online. The account's limit is
//! the higher one, so that a stranger's guesses from one address cannot lock its owner out:
//! that takes failures from several addresses. Kept in memory (bounded): a restart forgets
//! it, which costs an attacker a restart they cannot cause.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed from one address within [`WINDOW`].
pub const ADDRESS_FAILURES: usize = 5;
/// Failures allowed for one account within [`WINDOW`], from all addresses together.
pub const ACCOUNT_FAILURES: usize = 20;
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

impl Key {
    /// The failures it is allowed within [`WINDOW`].
    fn limit(&self) -> usize {
        match self {
            Key::Account(_) => ACCOUNT_FAILURES,
            Key::Address(_) => ADDRESS_FAILURES,
        }
    }
}

/// An email longer than this (no account can have one) is counted by address only, so the
/// table never holds such keys.
const MAX_EMAIL_BYTES: usize = 254;

/// The failure counters, and the attempts still being checked.
#[derive(Default)]
pub struct Throttle {
    state: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    failures: HashMap<Key, Vec<Instant>>,
    /// Attempts admitted and not yet settled: they count as failures until they are, so that
    /// many sign-ins sent at once cannot all pass the check before the first one fails.
    pending: HashMap<Key, usize>,
}

/// An admitted sign-in attempt: settle it with [`Attempt::failed`] or
/// [`Attempt::succeeded`]; dropped unsettled (the request went away), it counts for nothing.
pub struct Attempt<'a> {
    throttle: &'a Throttle,
    keys: Vec<Key>,
}

impl Throttle {
    /// Admits an attempt for `email` from `address`, or `Err(wait)` when either has used up
    /// its failures (counting the attempts still being checked).
    pub fn admit(&self, email: &str, address: Option<IpAddr>) -> Result<Attempt<'_>, Duration> {
        let now = Instant::now();
        let keys = keys(email, address);
        let mut counts = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait: Option<Duration> = None;
        for key in &keys {
            let failed = counts.failures.get_mut(key).map_or(0, |times| {
                times.retain(|t| now.duration_since(*t) < WINDOW);
                times.len()
            });
            let pending = counts.pending.get(key).copied().unwrap_or(0);
            if failed + pending >= key.limit() {
                // Blocked by failures: until the oldest leaves the window; by attempts still
                // running only: a second, by when they are settled.
                let until = match counts.failures.get(key) {
                    Some(times) if failed >= key.limit() => {
                        WINDOW.saturating_sub(now.duration_since(times[0]))
                    }
                    _ => Duration::from_secs(1),
                };
                wait = Some(wait.map_or(until, |w| w.max(until)));
            }
        }
        if let Some(wait) = wait {
            return Err(wait);
        }
        for key in &keys {
            *counts.pending.entry(key.clone()).or_default() += 1;
        }
        Ok(Attempt {
            throttle: self,
            keys,
        })
    }
}

impl Attempt<'_> {
    /// Counts a failed sign-in against the account and the address.
    pub fn failed(self) {
        let now = Instant::now();
        let mut counts = self
            .throttle
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if counts.failures.len() >= MAX_TRACKED {
            counts.failures.retain(|_, times| {
                times
                    .last()
                    .is_some_and(|t| now.duration_since(*t) < WINDOW)
            });
        }
        if counts.failures.len() >= MAX_TRACKED {
            // Still full within the window (failures from many addresses): a tenth goes,
            // addresses before accounts and the oldest first, never an account that is
            // blocked (flooding the table must not buy more guesses at one account).
            let mut candidates: Vec<(bool, Instant, Key)> = (counts.failures.iter())
                .filter(|(key, times)| {
                    !matches!(key, Key::Account(_))
                        || times
                            .iter()
                            .filter(|t| now.duration_since(**t) < WINDOW)
                            .count()
                            < key.limit()
                })
                .filter_map(|(key, times)| {
                    let account = matches!(key, Key::Account(_));
                    Some((account, *times.last()?, key.clone()))
                })
                .collect();
            candidates.sort_unstable_by_key(|(account, at, _)| (*account, *at));
            for (_, _, key) in candidates.into_iter().take(MAX_TRACKED / 10) {
                counts.failures.remove(&key);
            }
        }
        for key in &self.keys {
            let times = counts.failures.entry(key.clone()).or_default();
            times.push(now);
            if times.len() > key.limit() {
                times.remove(0);
            }
        }
    }

    /// Forgets the account's failures: it signed in.
    pub fn succeeded(self) {
        let mut counts = self
            .throttle
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for key in self.keys.iter().filter(|k| matches!(k, Key::Account(_))) {
            counts.failures.remove(key);
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut counts = self
            .throttle
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            if let Some(n) = counts.pending.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.pending.remove(key);
                }
            }
        }
    }
}

fn keys(email: &str, address: Option<IpAddr>) -> Vec<Key> {
    let mut keys = Vec::new();
    if email.len() <= MAX_EMAIL_BYTES {
        keys.push(Key::Account(email.to_string()));
    }
    keys.extend(address.map(Key::Address));
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_block_the_address_not_the_account_elsewhere() {
        let t = Throttle::default();
        let stranger: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..ADDRESS_FAILURES {
            t.admit("ada@example.com", Some(stranger)).unwrap().failed();
        }
        assert!(t.admit("ada@example.com", Some(stranger)).is_err());
        // The same address, another account: blocked too.
        assert!(t.admit("bob@example.com", Some(stranger)).is_err());
        // The account's owner, elsewhere: not locked out by a stranger's guesses.
        let home: IpAddr = "198.51.100.7".parse().unwrap();
        assert!(t.admit("ada@example.com", Some(home)).is_ok());
    }

    #[test]
    fn failures_from_many_addresses_block_the_account() {
        let t = Throttle::default();
        for n in 0..ACCOUNT_FAILURES as u32 {
            let address = IpAddr::from(std::net::Ipv4Addr::from(0xc633_6400 + n));
            t.admit("ada@example.com", Some(address)).unwrap().failed();
        }
        let fresh: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(t.admit("ada@example.com", Some(fresh)).is_err());
        assert!(t.admit("bob@example.com", Some(fresh)).is_ok());
    }

    #[test]
    fn attempts_at_once_count_before_they_fail() {
        let t = Throttle::default();
        let home: IpAddr = "192.0.2.1".parse().unwrap();
        let running: Vec<_> = (0..ADDRESS_FAILURES)
            .map(|_| t.admit("ada@example.com", Some(home)).unwrap())
            .collect();
        let wait = t.admit("ada@example.com", Some(home)).err();
        assert_eq!(wait, Some(Duration::from_secs(1)), "a sixth at once");
        // Settled as successes, or abandoned: the slots are free again.
        drop(running);
        assert!(t.admit("ada@example.com", Some(home)).is_ok());
    }

    #[test]
    fn a_success_forgets_the_account_but_not_the_address() {
        let t = Throttle::default();
        let home: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..ADDRESS_FAILURES - 1 {
            t.admit("ada@example.com", Some(home)).unwrap().failed();
        }
        t.admit("ada@example.com", Some(home)).unwrap().succeeded();
        let away: IpAddr = "198.51.100.7".parse().unwrap();
        for _ in 0..ADDRESS_FAILURES {
            t.admit("ada@example.com", Some(away)).unwrap().failed();
        }
        assert!(t.admit("ada@example.com", Some(away)).is_err());
    }

    /// Failures from ever new accounts and addresses within the window (a botnet) do not
    /// grow the table past its bound.
    #[test]
    fn the_table_stays_bounded_within_the_window() {
        let t = Throttle::default();
        for n in 0..MAX_TRACKED as u32 {
            let address = IpAddr::from(std::net::Ipv6Addr::from(u128::from(n)));
            t.admit(&format!("u{n}@example.com"), Some(address))
                .unwrap()
                .failed();
        }
        let tracked = t.state.lock().unwrap().failures.len();
        assert!(tracked <= MAX_TRACKED + 2, "{tracked} entries");
    }

    /// Flooding the table with failures from new addresses does not free a blocked account:
    /// addresses go first, and a blocked account never.
    #[test]
    fn a_flood_does_not_unblock_an_account() {
        let t = Throttle::default();
        for n in 0..ACCOUNT_FAILURES as u32 {
            let address = IpAddr::from(std::net::Ipv4Addr::from(0xc633_6400 + n));
            t.admit("ada@example.com", Some(address)).unwrap().failed();
        }
        for n in 0..MAX_TRACKED as u32 {
            let address = IpAddr::from(std::net::Ipv6Addr::from(u128::from(n) + 1));
            t.admit(&format!("u{n}@example.com"), Some(address))
                .unwrap()
                .failed();
        }
        assert!(t.admit("ada@example.com", None).is_err(), "ada unblocked");
    }

    #[test]
    fn an_overlong_email_is_counted_by_address_only() {
        let t = Throttle::default();
        let home: IpAddr = "192.0.2.1".parse().unwrap();
        let long = format!("{}@example.com", "a".repeat(MAX_EMAIL_BYTES));
        t.admit(&long, Some(home)).unwrap().failed();
        let counts = t.state.lock().unwrap();
        assert_eq!(counts.failures.len(), 1);
        assert!(counts.failures.contains_key(&Key::Address(home)));
    }
}
