//! Lists deployments' commits before anyone asks, so that the change lead time counts from
//! the Git source's commit times and not only for the deployments someone opened: at once
//! when a repository is mapped (by any process), then every [`ROUND`], the recent deployments
//! of mapped repositories whose commits are not listed yet.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::CorrelationState;
use super::commits::commits_of;
use crate::storage::{EventQuery, now_micros};

/// How often the recent deployments are looked at.
const ROUND: Duration = Duration::from_secs(60);
/// How often the mappings are checked for a change (a new mapping starts a round).
const CUE: Duration = Duration::from_secs(2);
/// How far back deployments are listed.
const LOOKBACK_MICROS: i64 = 30 * 86_400_000_000;
/// Most deployments looked at per org and round (the newest).
const PER_ROUND: i64 = 500;
/// How long a deployment whose commits cannot be listed (its commit is not in the repository,
/// the source refuses) waits before it is tried again.
const RETRY_FAILED: Duration = Duration::from_secs(3600);

/// Deployments that failed for a reason of their own, and when: skipped until [`RETRY_FAILED`].
type Failed = HashMap<(i64, String), tokio::time::Instant>;

/// Until `shutdown`: a round at each mapping change and every [`ROUND`].
pub async fn keep_listing(state: CorrelationState, shutdown: CancellationToken) {
    let mut seen_change = -1;
    let mut last_round = tokio::time::Instant::now();
    let mut failed = Failed::new();
    loop {
        match state.store.repository_source_orgs().await {
            Ok((orgs, changed)) if changed != seen_change || last_round.elapsed() >= ROUND => {
                seen_change = changed;
                last_round = tokio::time::Instant::now();
                failed.retain(|_, at| at.elapsed() < RETRY_FAILED);
                for org_id in orgs {
                    tokio::select! {
                        () = list_org(&state, org_id, &mut failed) => {}
                        () = shutdown.cancelled() => return,
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(cause = %e, "cannot read the repository mappings; will retry"),
        }
        tokio::select! {
            () = tokio::time::sleep(CUE) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Lists the org's recent, unlisted deployments of mapped repositories, oldest first. A
/// repository that cannot be read (its bridge has no tunnel, its source refuses or does not
/// answer) waits for the next round; a deployment that fails on its own (its `sha` is not a
/// commit id or not in the repository) waits [`RETRY_FAILED`], without holding up the
/// others. A list made through an earlier mapping is made again.
async fn list_org(state: &CorrelationState, org_id: i64, failed: &mut Failed) {
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
    for d in deployments {
        let body: Value = serde_json::from_str(&d.body).unwrap_or_default();
        let text = |k: &str| body.get(k).and_then(Value::as_str);
        let Some((repository, place)) = text("repository").and_then(|r| mapped.get_key_value(r))
        else {
            continue;
        };
        let key = (org_id, d.id.clone());
        if text("sha").is_none() || failing.contains(repository) || failed.contains_key(&key) {
            continue;
        }
        match state.store.listed_commits(org_id, &d.id).await {
            Ok(None) => {}
            Ok(Some(listed)) if listed.source != *place => {}
            _ => continue,
        }
        if let Err(p) = commits_of(state, org_id, &d.id).await {
            tracing::debug!(deployment = %d.id, cause = %p.detail, "cannot list a deployment's commits yet");
            if p.status == 409 || p.detail.starts_with("commit ") {
                failed.insert(key, tokio::time::Instant::now());
            } else {
                failing.insert(repository.to_string());
            }
        }
    }
}
