//! The memory that request bodies read whole before their handler (the dashboard's forms,
//! correlation's JSON) may hold at once. They are read before any sign-in is checked (a
//! sign-in form has nothing to check yet), so without a bound slow clients announcing large
//! bodies could hold gigabytes; and one client may hold only a quarter of it, so that it cannot
//! take the rest from everyone else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use tokio::sync::{Semaphore, SemaphorePermit};

/// All bodies read whole, together.
pub const IN_MEMORY: usize = 64 * 1024 * 1024;
/// One client address's share of [`IN_MEMORY`].
pub const PER_CLIENT: usize = IN_MEMORY / 4;

/// [`IN_MEMORY`] in KiB permits.
static BUDGET: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(IN_MEMORY / 1024));
/// KiB held by each client address.
static HELD: LazyLock<Mutex<HashMap<IpAddr, usize>>> = LazyLock::new(Default::default);

/// Memory reserved for one body; given back when dropped (once its handler is done with it).
pub struct Reservation {
    _permit: SemaphorePermit<'static>,
    client: Option<(IpAddr, usize)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((ip, kib)) = self.client {
            let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = held.get_mut(&ip) {
                *n = n.saturating_sub(kib);
                if *n == 0 {
                    held.remove(&ip);
                }
            }
        }
    }
}

/// Reserves room for a body of `bytes` (its `Content-Length`, or the most it may be when it
/// does not say) for `client`; `None` when it would pass [`IN_MEMORY`] or the client's share.
pub fn reserve(client: Option<IpAddr>, bytes: usize) -> Option<Reservation> {
    let kib = bytes.div_ceil(1024).max(1);
    let permit = BUDGET.try_acquire_many(u32::try_from(kib).ok()?).ok()?;
    let client = match client.map(share_of) {
        Some(ip) => {
            let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
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
        client,
    })
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
            .map(|_| reserve(a, two_mib).expect("within the client's share"))
            .collect();
        assert!(reserve(a, 1).is_none(), "over the client's share");
        assert!(
            reserve(b, two_mib).is_some(),
            "another client still has room"
        );
        drop(mine);
        assert!(reserve(a, two_mib).is_some(), "given back when dropped");
        let (c, d) = ("2001:db8::1".parse().ok(), "2001:db8::2".parse().ok());
        let held: Vec<_> = (0..PER_CLIENT / two_mib)
            .map(|_| reserve(c, two_mib).unwrap())
            .collect();
        assert!(reserve(d, two_mib).is_none(), "one /64, one share");
        drop(held);
    }
}
