//! `--ingest-memory-mb`: how much signal request body the server ingests at once, so memory
//! stays bounded whatever the number of clients, and shared between orgs, so that one tenant's
//! slow or numerous uploads cannot take it all (one org holds at most half).
//!
//! Shares are counted in KiB of the body received so far: a request starts with a small share
//! ([`FIRST_SHARE`], or its whole announced body when that is smaller) and grows it as its
//! bytes arrive, so a client that announces a megabyte and sends a byte now and then holds
//! almost nothing. A share is held until the request is answered: the body, its parsed
//! events and their commit are in memory till then (about five times the body).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The smallest budget, and the smallest share of one org: one largest request (1 MiB).
const MIN_KIB: usize = 1024;

/// The bytes being ingested, for all orgs and for each.
pub struct IngestBudget {
    all: Arc<Semaphore>,
    per_org_kib: usize,
    orgs: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// The bytes held, for `/metrics` (`signals_ingest_memory_bytes`).
    held: Gauge,
}

/// What a request takes before its first byte: enough for most requests whole.
pub const FIRST_SHARE: usize = 64 * 1024;

/// A request's share, given back when dropped.
pub struct Share {
    org_budget: Arc<Semaphore>,
    org: OwnedSemaphorePermit,
    all: OwnedSemaphorePermit,
    held: Gauge,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.held.dec_by(self.all.num_permits() as i64 * 1024);
    }
}

impl Share {
    /// Bytes this share covers.
    pub fn bytes(&self) -> usize {
        self.org.num_permits() * 1024
    }
}

impl IngestBudget {
    /// A budget of `bytes` in all, half of it (at least 1 MiB) for any one org; `held` shows
    /// how much of it requests hold.
    pub fn new(bytes: usize, held: Gauge) -> Self {
        let total = (bytes / 1024).clamp(MIN_KIB, Semaphore::MAX_PERMITS);
        IngestBudget {
            all: Arc::new(Semaphore::new(total)),
            per_org_kib: (total / 2).max(MIN_KIB),
            orgs: Mutex::new(HashMap::new()),
            held,
        }
    }

    /// A share of `bytes` for `org`, waiting up to `wait` for its org's and then everybody's
    /// requests to finish; `None` when that was not enough.
    pub async fn take(&self, org: i64, bytes: usize, wait: Duration) -> Option<Share> {
        let kib = u32::try_from(bytes.div_ceil(1024).clamp(1, self.per_org_kib)).ok()?;
        let deadline = Instant::now() + wait;
        let org_budget = self
            .orgs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(org)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_org_kib)))
            .clone();
        let org_share = acquire(org_budget.clone(), kib, deadline).await?;
        let all_share = acquire(self.all.clone(), kib, deadline).await?;
        self.held.inc_by(i64::from(kib) * 1024);
        Some(Share {
            org_budget,
            org: org_share,
            all: all_share,
            held: self.held.clone(),
        })
    }

    /// Grows `share` to cover `bytes`, waiting up to `wait` as [`IngestBudget::take`] does;
    /// `false` when that was not enough (the share keeps what it had).
    pub async fn grow(&self, share: &mut Share, bytes: usize, wait: Duration) -> bool {
        let want = bytes.div_ceil(1024).min(self.per_org_kib);
        let Some(more) = want
            .checked_sub(share.org.num_permits())
            .filter(|&n| n > 0)
            .and_then(|n| u32::try_from(n).ok())
        else {
            return true;
        };
        let deadline = Instant::now() + wait;
        let Some(org) = acquire(share.org_budget.clone(), more, deadline).await else {
            return false;
        };
        let Some(all) = acquire(self.all.clone(), more, deadline).await else {
            return false;
        };
        share.org.merge(org);
        share.all.merge(all);
        self.held.inc_by(i64::from(more) * 1024);
        true
    }
}

/// `kib` permits of `budget`, at once if free, else by `deadline`.
async fn acquire(
    budget: Arc<Semaphore>,
    kib: u32,
    deadline: Instant,
) -> Option<OwnedSemaphorePermit> {
    match budget.clone().try_acquire_many_owned(kib) {
        Ok(permit) => Some(permit),
        Err(_) => tokio::time::timeout_at(deadline, budget.acquire_many_owned(kib))
            .await
            .ok()?
            .ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[tokio::test(start_paused = true)]
    async fn one_org_gets_half_and_waits_its_turn_while_others_still_fit() {
        let budget = IngestBudget::new(4 * MIB, Gauge::default());
        let wait = Duration::from_secs(2);
        let a1 = budget.take(1, MIB, wait).await.expect("first MiB");
        let _a2 = budget
            .take(1, MIB, wait)
            .await
            .expect("second MiB: half of 4");
        assert!(
            budget.take(1, 1, wait).await.is_none(),
            "org 1 holds its half; a third share waits, then is refused"
        );
        let _b = budget
            .take(2, 2 * MIB, wait)
            .await
            .expect("another org still has the other half");
        assert!(
            budget.take(3, 1, wait).await.is_none(),
            "all 4 MiB are held"
        );
        // A share given back lets a waiting request of that org in.
        let waiting = tokio::spawn({
            let budget = Arc::new(budget);
            async move { budget.take(1, MIB, Duration::from_secs(10)).await.is_some() }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(a1);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_grows_with_its_body_and_only_then_crowds_others() {
        let budget = IngestBudget::new(4 * MIB, Gauge::default());
        let wait = Duration::from_secs(1);
        // Four slow uploads that announced a megabyte hold their first 64 KiB each.
        let mut slow = Vec::new();
        for org in [1, 1, 2, 2] {
            slow.push(
                budget
                    .take(org, FIRST_SHARE, wait)
                    .await
                    .expect("first share"),
            );
        }
        assert_eq!(slow[0].bytes(), FIRST_SHARE);
        // A third org still gets a whole megabyte.
        let mut third = budget.take(3, FIRST_SHARE, wait).await.unwrap();
        assert!(budget.grow(&mut third, MIB, wait).await);
        assert_eq!(third.bytes(), MIB);
        // Growing past an org's half waits, then fails, keeping what it had.
        assert!(budget.grow(&mut slow[0], MIB, wait).await);
        assert!(!budget.grow(&mut slow[1], 2 * MIB, wait).await);
        assert_eq!(slow[1].bytes(), FIRST_SHARE);
        // The gauge shows what is held, and what is given back.
        assert_eq!(budget.held.get(), (MIB + 3 * FIRST_SHARE + MIB) as i64);
        drop(third);
        assert_eq!(budget.held.get(), (3 * FIRST_SHARE + MIB) as i64);
    }

    #[test]
    fn small_budgets_still_take_one_largest_request_per_org() {
        let budget = IngestBudget::new(1, Gauge::default());
        assert_eq!(budget.all.available_permits(), MIN_KIB);
        assert_eq!(budget.per_org_kib, MIN_KIB);
    }
}
