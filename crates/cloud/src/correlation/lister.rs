//! Lists deployments' commits before anyone asks, so that the change lead time counts from
//! the Git source's commit times and not only for the deployments someone opened: at once
//! when a repository is mapped (by any process), then every [`ROUND`], the recent deployments
//! of mapped repositories whose commits are not listed yet. Orgs are listed side by side, up
//! to [`ORGS_AT_ONCE`]: an org whose Git server is slow or silent holds up its own listing
//! only. Each round also deletes what crashed first clones left (`Mirrors::sweep_partials`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::CorrelationState;
use super::commits::commits_of;
use super::mirror::is_commit_id;
use crate::storage::{EventQuery, now_micros};

/// How often the recent deployments are looked at.
const ROUND: Duration = Duration::from_secs(60);
/// How often the mappings are checked for a change (a new mapping starts a round), and
/// orgs waiting for a turn are started.
const CUE: Duration = Duration::from_secs(2);
/// How far back deployments are listed.
const LOOKBACK_MICROS: i64 = 30 * 86_400_000_000;
/// Most deployments looked at per org and round (the newest).
const PER_ROUND: i64 = 500;
/// Most orgs listed at once (each runs one git command at a time), below the mirrors' limit
/// for the whole process (correlation/gates.rs), so callers asking for commits keep a turn.
const ORGS_AT_ONCE: usize = 4;
/// How long a deployment whose commits cannot be listed (its commit is not in the repository,
/// the source refuses) waits before it is tried again.
const RETRY_FAILED: Duration = Duration::from_secs(3600);

/// Deployments that failed for a reason of their own, and when: skipped until [`RETRY_FAILED`].
type Failed = Arc<Mutex<HashMap<(i64, String), tokio::time::Instant>>>;

/// Orgs waiting for a listing, first come first served: an org that is listed again while
/// its last listing still runs waits behind the others, so a few slow orgs never keep the
/// rest from their turn.
#[derive(Default)]
struct Queue {
    order: VecDeque<i64>,
    queued: HashSet<i64>,
}

impl Queue {
    /// Queues each of `orgs` not queued yet, at the back.
    fn extend(&mut self, orgs: impl IntoIterator<Item = i64>) {
        for org in orgs {
            if self.queued.insert(org) {
                self.order.push_back(org);
            }
        }
    }

    /// Up to `free` orgs to start now, oldest in the queue first, skipping those for which
    /// `running` is true (they go to the back).
    fn take(&mut self, free: usize, running: impl Fn(i64) -> bool) -> Vec<i64> {
        let mut started = Vec::new();
        let mut skipped = Vec::new();
        while started.len() < free {
            let Some(org) = self.order.pop_front() else {
                break;
            };
            if running(org) {
                skipped.push(org);
            } else {
                self.queued.remove(&org);
                started.push(org);
            }
        }
        self.order.extend(skipped);
        started
    }
}

/// Until `shutdown`: a round at each mapping change and every [`ROUND`]. A round queues every
/// mapped org; queued orgs start in turn when no listing of theirs is running and fewer than
/// [`ORGS_AT_ONCE`] are.
pub async fn keep_listing(state: CorrelationState, shutdown: CancellationToken) {
    let mut seen_change = -1;
    let mut last_round = tokio::time::Instant::now();
    let failed = Failed::default();
    let mut queue = Queue::default();
    let mut running: HashMap<i64, JoinHandle<()>> = HashMap::new();
    loop {
        match state.store.repository_source_orgs().await {
            Ok((orgs, changed)) if changed != seen_change || last_round.elapsed() >= ROUND => {
                seen_change = changed;
                last_round = tokio::time::Instant::now();
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|_, at| at.elapsed() < RETRY_FAILED);
                queue.extend(orgs);
                state.mirrors.sweep_partials().await;
            }
            Ok(_) => {}
            Err(e) => (state.store).background_failure(&e, "cannot read the repository mappings"),
        }
        running.retain(|_, listing| !listing.is_finished());
        let free = ORGS_AT_ONCE.saturating_sub(running.len());
        for org_id in queue.take(free, |org| running.contains_key(&org)) {
            let (state, failed) = (state.clone(), failed.clone());
            let listing = tokio::spawn(async move { list_org(&state, org_id, &failed).await });
            running.insert(org_id, listing);
        }
        tokio::select! {
            () = tokio::time::sleep(CUE) => {}
            () = shutdown.cancelled() => break,
        }
    }
    // The listings stop here; a fetch one of them started runs on until it ends or the
    // shutdown's drain does (commits_of keeps fetches apart from who asked for them).
    for listing in running.into_values() {
        listing.abort();
    }
}

/// Lists the org's recent, unlisted deployments of mapped repositories, oldest first. A
/// repository that cannot be read (its bridge has no tunnel, its source refuses or does not
/// answer) waits for the next round; a deployment that fails on its own (its `sha` is not a
/// commit id or not in the repository) waits [`RETRY_FAILED`], without holding up the
/// others. A list made through an earlier mapping is made again.
async fn list_org(state: &CorrelationState, org_id: i64, failed: &Failed) {
    let Ok(sources) = state.store.repository_sources(org_id).await else {
        return;
    };
    let mapped: HashMap<String, String> = sources
        .into_iter()
        .map(|s| (s.repository.clone(), s.place()))
        .collect();
    let query = EventQuery {
        kind: Some("deployment".into()),
        service: None,
        environment: None,
        since: Some(now_micros() - LOOKBACK_MICROS),
        until: None,
        after: None,
        limit: PER_ROUND,
    };
    let Ok(mut deployments) = state.store.list_events(org_id, &query).await else {
        return;
    };
    deployments.reverse();
    let mut failing: HashSet<String> = HashSet::new();
    // The commit of the last deployment met so far (oldest first) that a later one of the same
    // service, environment and repository starts from: successful or status-less, naming one.
    let mut last_of: HashMap<(String, String, String), String> = HashMap::new();
    for d in deployments {
        let body: Value = serde_json::from_str(&d.body).unwrap_or_default();
        let text = |k: &str| body.get(k).and_then(Value::as_str);
        let scope = match (text("service"), text("environment"), text("repository")) {
            (Some(s), Some(e), Some(r)) => Some((s.to_string(), e.to_string(), r.to_string())),
            _ => None,
        };
        let previous_here = scope.as_ref().and_then(|s| last_of.get(s)).cloned();
        if let (Some(scope), Some(sha)) = (scope, text("sha"))
            && matches!(text("status"), None | Some("success"))
        {
            last_of.insert(scope, sha.to_string());
        }
        let Some((repository, place)) = text("repository").and_then(|r| mapped.get_key_value(r))
        else {
            continue;
        };
        let key = (org_id, d.id.clone());
        let skipped = failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&key);
        if text("sha").is_none() || failing.contains(repository) || skipped {
            continue;
        }
        // Listed before a deployment between it and its previous one arrived (late): listed
        // again, from that one.
        let previous_here = previous_here.filter(|sha| is_commit_id(sha));
        match state.store.listed_commits(org_id, &d.id).await {
            Ok(None) => {}
            Ok(Some(listed)) if listed.source != *place => {}
            Ok(Some(listed)) if previous_here.is_some() && listed.previous_sha != previous_here => {
            }
            _ => continue,
        }
        if let Err(p) = commits_of(state, org_id, &d.id).await {
            tracing::debug!(deployment = %d.id, cause = %p.detail, "cannot list a deployment's commits yet");
            if p.status == 409 || p.detail.starts_with("commit ") {
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, tokio::time::Instant::now());
            } else {
                failing.insert(repository.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Queue;

    #[test]
    fn slow_orgs_listed_again_wait_behind_the_others() {
        let mut queue = Queue::default();
        queue.extend(1..=5);
        let running = [1, 2, 3, 4];
        assert_eq!(queue.take(4, |_| false), [1, 2, 3, 4]);
        // The next round queues everyone again while 1 to 4 still run; 1 then ends.
        queue.extend(1..=5);
        assert_eq!(queue.take(1, |org| running[1..].contains(&org)), [5]);
        assert_eq!(queue.take(1, |org| running[1..].contains(&org)), [1]);
        assert_eq!(
            queue.take(4, |org| running[1..].contains(&org)),
            Vec::<i64>::new()
        );
        assert_eq!(queue.take(4, |_| false), [2, 3, 4]);
    }
}
