//! How many `git` commands the mirrors run at once: a few in all, fewer for one org, and one
//! per mirror. A burst of commit listings (callers, or the background lister catching up on a
//! month of deployments) then queues instead of starting a clone of every repository at once,
//! and one org's listings cannot take every slot from the others.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most commit listings running at once in one process.
pub const IN_ALL: usize = 8;
/// Most commit listings of one org running at once.
pub const PER_ORG: usize = 2;

/// A semaphore per key, made on first use and dropped from the map once no one holds or
/// awaits it: keys come and go (orgs, mirrors) without the map growing.
pub struct Keyed<K> {
    permits: usize,
    map: Mutex<HashMap<K, Arc<Semaphore>>>,
}

/// A permit of one key of a [`Keyed`]; dropping it may remove the key's semaphore.
pub struct KeyedPermit<'a, K: Eq + Hash + Clone> {
    owner: &'a Keyed<K>,
    key: K,
    permit: Option<OwnedSemaphorePermit>,
}

impl<K: Eq + Hash + Clone> Keyed<K> {
    /// Semaphores of `permits` each.
    pub fn new(permits: usize) -> Self {
        Keyed {
            permits,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a permit of `key`.
    pub async fn acquire(&self, key: K) -> KeyedPermit<'_, K> {
        // The guard exists before the wait: a caller that gives up waiting still clears the
        // key's entry when it was the last one.
        let mut guard = KeyedPermit {
            owner: self,
            key: key.clone(),
            permit: None,
        };
        let semaphore = self
            .lock()
            .entry(key)
            .or_insert_with(|| Arc::new(Semaphore::new(self.permits)))
            .clone();
        // Never closed, so acquiring cannot fail.
        guard.permit = semaphore.acquire_owned().await.ok();
        guard
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<Semaphore>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Eq + Hash + Clone> Drop for KeyedPermit<'_, K> {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut map = self.owner.lock();
        // Only the map's own reference left: no holder, no waiter (each holds a clone while
        // it waits), and none can appear without taking the map's lock first.
        if map
            .get(&self.key)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            map.remove(&self.key);
        }
    }
}

/// The limits the mirrors share: [`IN_ALL`] in the process, [`PER_ORG`] per org.
pub struct Gates {
    all: Arc<Semaphore>,
    orgs: Keyed<i64>,
}

/// The permits of one listing; dropped when it ends.
pub struct Pass<'a> {
    _org: KeyedPermit<'a, i64>,
    _all: OwnedSemaphorePermit,
}

impl Gates {
    /// The process's gates.
    pub fn new(in_all: usize, per_org: usize) -> Self {
        Gates {
            all: Arc::new(Semaphore::new(in_all)),
            orgs: Keyed::new(per_org),
        }
    }

    /// Waits for the org's turn, then for the process's.
    pub async fn enter(&self, org_id: i64) -> Pass<'_> {
        let org = self.orgs.acquire(org_id).await;
        let all = self
            .all
            .clone()
            .acquire_owned()
            .await
            .expect("the gates' semaphore is never closed");
        Pass {
            _org: org,
            _all: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    impl<K: Eq + Hash + Clone> Keyed<K> {
        fn len(&self) -> usize {
            self.lock().len()
        }

        fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    /// Whether `future` is still waiting after the runtime has run everything else it can.
    async fn waits<F: std::future::Future>(future: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), future)
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn one_org_cannot_take_every_slot() {
        let gates = Gates::new(3, 2);
        let _a1 = gates.enter(1).await;
        let _a2 = gates.enter(1).await;
        assert!(
            waits(gates.enter(1)).await,
            "a third listing of org 1 waits"
        );
        let _b1 = gates.enter(2).await;
        assert!(waits(gates.enter(3)).await, "the process is full");
        drop(_a1);
        let _c1 = gates.enter(3).await;
    }

    #[tokio::test(start_paused = true)]
    async fn keys_leave_the_map_when_unused() {
        let locks = Keyed::new(1);
        let first = locks.acquire("a").await;
        assert_eq!(locks.len(), 1);
        assert!(waits(locks.acquire("a")).await, "one at a time");
        assert_eq!(locks.len(), 1, "a waiter gone leaves the holder's entry");
        drop(first);
        assert!(locks.is_empty());
        {
            let _a = locks.acquire("a").await;
            let _b = locks.acquire("b").await;
            assert_eq!(locks.len(), 2);
        }
        assert!(locks.is_empty());
    }
}
