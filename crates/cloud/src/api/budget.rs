//! `--ingest-memory-mb`: how much signal request body the server ingests at once, so memory
//! stays bounded whatever the number of clients, and shared between orgs, so that one tenant's
//! slow or numerous uploads cannot take it all (one org holds at most half).
//!
//! Shares are counted in KiB, in two steps. A request starts with a small share
//! ([`FIRST_SHARE`], or its whole announced body when that is smaller), so a client that
//! announces a megabyte and sends a byte now and then holds almost nothing until it has sent
//! that much. A body that outgrows it takes what it needs whole (its `Content-Length`, or
//! 1 MiB without one) at once, held for at most the body's time limits ([`super::body`]).
//!
//! Taking the rest at once, never a piece at a time, is what keeps concurrent large batches
//! from waiting on each other: requests growing a piece at a time could together hold the
//! whole budget, each waiting for the others to finish (four 1 MiB batches of one org did).
//! The one wait left, a first share waiting for the rest, cannot close a circle either:
//! requests in their first step hold at most the budget less one largest request between them
//! ([`IngestBudget::starting`]), so what the others hold is held by requests that no longer
//! wait for the budget, and they finish. A share is held until the request is answered: the
//! body, its parsed events and their commit are in memory till then (about five times the body).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::signals::batch::MAX_REQUEST_BYTES;

/// One largest request (1 MiB): the smallest budget, and the smallest share of one org.
const MAX_KIB: usize = MAX_REQUEST_BYTES / 1024;

/// What a request takes before its first byte: enough for most requests whole.
pub const FIRST_SHARE: usize = 64 * 1024;

/// The bytes being ingested, for all orgs and for each.
pub struct IngestBudget {
    /// What requests hold.
    memory: Pools,
    /// What requests still in their first step hold: at most the budget less one largest
    /// request, for all orgs and for each, so that a request taking the rest can always get it
    /// once the requests past their first step finish.
    starting: Pools,
    /// The bytes held, for `/metrics` (`signals_ingest_memory_bytes`).
    held: Gauge,
}

/// A request's share, given back when dropped.
pub struct Share {
    memory: Held,
    /// Until the request is past its first step.
    starting: Option<Held>,
    held: Gauge,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.held.dec_by(self.memory.kib() as i64 * 1024);
    }
}

impl Share {
    /// Bytes this share covers.
    pub fn bytes(&self) -> usize {
        self.memory.kib() * 1024
    }

    /// Marks the request past its first step (its body is read whole): it will not wait for
    /// the budget again, so its place among the starting requests is given back.
    pub fn settle(&mut self) {
        self.starting = None;
    }
}

impl IngestBudget {
    /// A budget of `bytes` in all, half of it (at least 1 MiB) for any one org; `held` shows
    /// how much of it requests hold.
    pub fn new(bytes: usize, held: Gauge) -> Self {
        let total = (bytes / 1024).clamp(MAX_KIB, Semaphore::MAX_PERMITS);
        let per_org = (total / 2).max(MAX_KIB);
        let starting = |kib: usize| kib.saturating_sub(MAX_KIB).max(FIRST_SHARE / 1024);
        IngestBudget {
            memory: Pools::new(total, per_org),
            starting: Pools::new(starting(total), starting(per_org)),
            held,
        }
    }

    /// A first share of `bytes` (at most [`FIRST_SHARE`]) for `org`, waiting up to `wait` for
    /// its org's and then everybody's requests; `None` when that was not enough.
    pub async fn take(&self, org: i64, bytes: usize, wait: Duration) -> Option<Share> {
        let kib = bytes.min(FIRST_SHARE).div_ceil(1024).max(1);
        let deadline = Instant::now() + wait;
        let starting = self.starting.take(org, kib, deadline).await?;
        let memory = self.memory.take(org, kib, deadline).await?;
        self.held.inc_by(kib as i64 * 1024);
        Some(Share {
            memory,
            starting: Some(starting),
            held: self.held.clone(),
        })
    }

    /// Grows `share` at once to the whole `bytes` its body needs (at most 1 MiB), waiting up
    /// to `wait` as [`IngestBudget::take`] does; `false` when that was not enough (the share
    /// keeps what it had). Past this the request waits for the budget no more.
    pub async fn grow(&self, share: &mut Share, bytes: usize, wait: Duration) -> bool {
        let want = bytes.div_ceil(1024).min(MAX_KIB);
        let Some(more) = want.checked_sub(share.memory.kib()).filter(|&n| n > 0) else {
            return true;
        };
        let deadline = Instant::now() + wait;
        if !self.memory.grow(&mut share.memory, more, deadline).await {
            return false;
        }
        self.held.inc_by(more as i64 * 1024);
        share.settle();
        true
    }
}

/// One budget in KiB, for all orgs and for each.
struct Pools {
    all: Arc<Semaphore>,
    per_org_kib: usize,
    orgs: Mutex<HashMap<i64, Arc<Semaphore>>>,
}

/// KiB of one [`Pools`], counted in both the org's and everybody's.
struct Held {
    org_pool: Arc<Semaphore>,
    org: OwnedSemaphorePermit,
    all: OwnedSemaphorePermit,
}

impl Held {
    fn kib(&self) -> usize {
        self.all.num_permits()
    }
}

impl Pools {
    fn new(total_kib: usize, per_org_kib: usize) -> Self {
        Pools {
            all: Arc::new(Semaphore::new(total_kib)),
            per_org_kib,
            orgs: Mutex::new(HashMap::new()),
        }
    }

    /// `kib` of `org`'s pool and then of everybody's, by `deadline`.
    async fn take(&self, org: i64, kib: usize, deadline: Instant) -> Option<Held> {
        let org_pool = self
            .orgs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(org)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_org_kib)))
            .clone();
        let org_held = acquire(&org_pool, kib, deadline).await?;
        let all = acquire(&self.all, kib, deadline).await?;
        Some(Held {
            org_pool,
            org: org_held,
            all,
        })
    }

    /// `kib` more for `held`, taken whole or not at all.
    async fn grow(&self, held: &mut Held, kib: usize, deadline: Instant) -> bool {
        let Some(org) = acquire(&held.org_pool, kib, deadline).await else {
            return false;
        };
        let Some(all) = acquire(&self.all, kib, deadline).await else {
            return false;
        };
        held.org.merge(org);
        held.all.merge(all);
        true
    }
}

/// `kib` permits of `pool`, at once if free, else by `deadline`.
async fn acquire(
    pool: &Arc<Semaphore>,
    kib: usize,
    deadline: Instant,
) -> Option<OwnedSemaphorePermit> {
    let kib = u32::try_from(kib).ok()?;
    match pool.clone().try_acquire_many_owned(kib) {
        Ok(permit) => Some(permit),
        Err(_) => tokio::time::timeout_at(deadline, pool.clone().acquire_many_owned(kib))
            .await
            .ok()?
            .ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;
    const WAIT: Duration = Duration::from_secs(2);

    /// A share of `org` grown to `bytes`.
    async fn whole(budget: &IngestBudget, org: i64, bytes: usize) -> Option<Share> {
        let mut share = budget.take(org, FIRST_SHARE, WAIT).await?;
        budget.grow(&mut share, bytes, WAIT).await.then_some(share)
    }

    #[tokio::test(start_paused = true)]
    async fn one_org_gets_half_and_waits_its_turn_while_others_still_fit() {
        let budget = Arc::new(IngestBudget::new(4 * MIB, Gauge::default()));
        let a1 = whole(&budget, 1, MIB).await.expect("first MiB");
        let _a2 = whole(&budget, 1, MIB).await.expect("second MiB: half of 4");
        assert!(
            budget.take(1, 1, WAIT).await.is_none(),
            "org 1 holds its half; a third share waits, then is refused"
        );
        let _b = whole(&budget, 2, MIB)
            .await
            .expect("another org still fits");
        let _b2 = whole(&budget, 2, MIB).await.expect("the other half");
        assert!(
            budget.take(3, 1, WAIT).await.is_none(),
            "all 4 MiB are held"
        );
        // A share given back lets a waiting request of that org in.
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.take(1, MIB, Duration::from_secs(10)).await.is_some() }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(a1);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_their_first_step_always_leave_room_for_one_whole() {
        let budget = Arc::new(IngestBudget::new(4 * MIB, Gauge::default()));
        // Sixteen large batches of one org start: their first shares fill the org's room for
        // starting requests (its half less 1 MiB), so a seventeenth waits.
        let mut started = Vec::new();
        for _ in 0..16 {
            started.push(
                budget
                    .take(1, FIRST_SHARE, WAIT)
                    .await
                    .expect("first share"),
            );
        }
        assert!(
            budget.take(1, 1, WAIT).await.is_none(),
            "the seventeenth waits"
        );
        // Each can still take its whole megabyte, in turn: never all stuck half-way.
        let mut first = started.remove(0);
        assert!(
            budget.grow(&mut first, MIB, WAIT).await,
            "room for one whole"
        );
        assert_eq!(first.bytes(), MIB);
        // Past its first step it gave its place back: a new request starts.
        let _next = budget.take(1, 1024, WAIT).await.expect("a place to start");
        let mut second = started.remove(0);
        let grown = tokio::spawn({
            let budget = budget.clone();
            async move {
                let ok = budget.grow(&mut second, MIB, Duration::from_secs(10)).await;
                (ok, second.bytes())
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!grown.is_finished(), "the org's half is held");
        drop(first);
        assert_eq!(grown.await.unwrap(), (true, MIB));
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_grows_whole_or_keeps_what_it_had_and_the_gauge_follows() {
        let budget = IngestBudget::new(4 * MIB, Gauge::default());
        let _a = whole(&budget, 1, MIB).await.unwrap();
        let _a2 = whole(&budget, 1, MIB / 2).await.unwrap();
        let mut a3 = budget.take(1, FIRST_SHARE, WAIT).await.unwrap();
        assert!(
            !budget.grow(&mut a3, MIB, WAIT).await,
            "448 KiB are left of the org's half, not the 960 it needs"
        );
        assert_eq!(a3.bytes(), FIRST_SHARE, "nothing taken in part");
        assert_eq!(budget.held.get(), (MIB + MIB / 2 + FIRST_SHARE) as i64);
        let small = budget.take(2, 300, WAIT).await.unwrap();
        assert_eq!(small.bytes(), 1024, "whole KiB");
        drop(small);
        drop(a3);
        assert_eq!(budget.held.get(), (MIB + MIB / 2) as i64);
    }

    #[test]
    fn small_budgets_still_take_one_largest_request_per_org() {
        let budget = IngestBudget::new(1, Gauge::default());
        assert_eq!(budget.memory.all.available_permits(), MAX_KIB);
        assert_eq!(budget.memory.per_org_kib, MAX_KIB);
        assert_eq!(budget.starting.per_org_kib, FIRST_SHARE / 1024);
    }
}
