//! The memory that request bodies read whole may hold at once: the dashboard's forms and
//! correlation's JSON before their handler ([`FORMS`]), and, in a pool of their own, the small
//! forwarded bodies held for a retry ([`FORWARDED`]). Forms are read before any sign-in is
//! checked (a sign-in form has nothing to check yet), and forwarded bodies wait on internal
//! systems, so without a bound slow clients announcing bodies could hold gigabytes; and one
//! client may hold only a quarter of a pool, so that it cannot take the rest from everyone
//! else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use tokio::sync::{Semaphore, SemaphorePermit};

/// All bodies of one pool read whole, together.
pub const IN_MEMORY: usize = 64 * 1024 * 1024;
/// One client address's share of [`IN_MEMORY`].
pub const PER_CLIENT: usize = IN_MEMORY / 4;

/// A pool of memory for bodies read whole: [`IN_MEMORY`] in all, [`PER_CLIENT`] per address.
pub struct Budget {
    /// [`IN_MEMORY`] in KiB permits.
    permits: Semaphore,
    /// KiB held by each client address.
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// The dashboard's forms and correlation's JSON: held while their handler runs.
pub static FORMS: LazyLock<Budget> = LazyLock::new(Budget::new);
/// Small forwarded bodies held for a retry: held until their answer's head, which may take
/// `--forward-timeout`, so a pool of their own: slow internal APIs never leave a sign-in form
/// without room.
pub static FORWARDED: LazyLock<Budget> = LazyLock::new(Budget::new);

/// Memory reserved for one body; given back when dropped.
pub struct Reservation {
    _permit: SemaphorePermit<'static>,
    budget: &'static Budget,
    client: Option<(IpAddr, usize)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((ip, kib)) = self.client {
            let mut held = self.budget.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = held.get_mut(&ip) {
                *n = n.saturating_sub(kib);
                if *n == 0 {
                    held.remove(&ip);
                }
            }
        }
    }
}

impl Budget {
    fn new() -> Self {
        Self {
            permits: Semaphore::new(IN_MEMORY / 1024),
            held: Mutex::default(),
        }
    }

    /// Reserves room for a body of `bytes` (its `Content-Length`, or the most it may be when
    /// it does not say) for `client`; `None` when it would pass [`IN_MEMORY`] or the client's
    /// share.
    pub fn reserve(&'static self, client: Option<IpAddr>, bytes: usize) -> Option<Reservation> {
        let kib = bytes.div_ceil(1024).max(1);
        let permit = self
            .permits
            .try_acquire_many(u32::try_from(kib).ok()?)
            .ok()?;
        let client = match client.map(share_of) {
            Some(ip) => {
                let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                let mine = held.entry(ip).or_default();
                if (*mine + kib) * 1024 > PER_CLIENT {
                    if *mine == 0 {
                        held.remove(&ip);
                    }
                    return None;
                }
                *mine += kib;
                Some((ip, kib))
            }
            None => None,
        };
        Some(Reservation {
            _permit: permit,
            budget: self,
            client,
        })
    }
}

/// The address whose share a client takes: its IPv4 address, or its IPv6 /64 (one host
/// commonly holds a whole /64, and would otherwise take a share per address).
fn share_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut octets = v6.octets();
            octets[8..].fill(0);
            IpAddr::V6(octets.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_holds_a_quarter_and_everyone_the_whole() {
        let (a, b) = ("127.0.0.10".parse().ok(), "127.0.0.11".parse().ok());
        let two_mib = 2 * 1024 * 1024;
        let mine: Vec<_> = (0..PER_CLIENT / two_mib)
            .map(|_| {
                FORMS
                    .reserve(a, two_mib)
                    .expect("within the client's share")
            })
            .collect();
        assert!(FORMS.reserve(a, 1).is_none(), "over the client's share");
        assert!(
            FORWARDED.reserve(a, 1).is_some(),
            "forwarded bodies have a pool of their own"
        );
        assert!(
            FORMS.reserve(b, two_mib).is_some(),
            "another client still has room"
        );
        drop(mine);
        assert!(
            FORMS.reserve(a, two_mib).is_some(),
            "given back when dropped"
        );
        let (c, d) = ("2001:db8::1".parse().ok(), "2001:db8::2".parse().ok());
        let held: Vec<_> = (0..PER_CLIENT / two_mib)
            .map(|_| FORMS.reserve(c, two_mib).unwrap())
            .collect();
        assert!(FORMS.reserve(d, two_mib).is_none(), "one /64, one share");
        drop(held);
    }
}
