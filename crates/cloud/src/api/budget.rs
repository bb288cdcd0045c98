//! `--ingest-memory-mb`: how much signal request body the server ingests at once, so memory
//! stays bounded whatever the number of clients, and shared between orgs, so that one tenant's
//! slow or numerous uploads cannot take it all (one org holds at most half).
//!
//! Shares are counted in KiB of each request's announced body (1 MiB when it announces none),
//! taken before the body is read and held until the request is answered: the body, its parsed
//! events and their commit are in memory till then (about five times the body).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The smallest budget, and the smallest share of one org: one largest request (1 MiB).
const MIN_KIB: usize = 1024;

/// The bytes being ingested, for all orgs and for each.
pub struct IngestBudget {
    all: Arc<Semaphore>,
    per_org_kib: usize,
    orgs: Mutex<HashMap<i64, Arc<Semaphore>>>,
}

/// A request's share, given back when dropped.
pub struct Share {
    _org: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl IngestBudget {
    /// A budget of `bytes` in all, half of it (at least 1 MiB) for any one org.
    pub fn new(bytes: usize) -> Self {
        let total = (bytes / 1024).clamp(MIN_KIB, Semaphore::MAX_PERMITS);
        IngestBudget {
            all: Arc::new(Semaphore::new(total)),
            per_org_kib: (total / 2).max(MIN_KIB),
            orgs: Mutex::new(HashMap::new()),
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
        let org_share = acquire(org_budget, kib, deadline).await?;
        let all_share = acquire(self.all.clone(), kib, deadline).await?;
        Some(Share {
            _org: org_share,
            _all: all_share,
        })
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
        let budget = IngestBudget::new(4 * MIB);
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

    #[test]
    fn small_budgets_still_take_one_largest_request_per_org() {
        let budget = IngestBudget::new(1);
        assert_eq!(budget.all.available_permits(), MIN_KIB);
        assert_eq!(budget.per_org_kib, MIN_KIB);
    }
}
