//! What to notify: each bridge of an org that has a connected instance older than the
//! release (once per bridge, running version and release), each release newer than the one
//! a webhook last heard of, and each new alert whose top suspect scores at least
//! [`STRONG_SUSPECT`].

use serde_json::json;

use super::Notifier;
use crate::insight::NoSuspects;
use crate::live::outdated;
use crate::storage::{EventQuery, StorageError};

/// The score from which a new alert's top suspect is sent to the org's webhook.
pub const STRONG_SUSPECT: f64 = 0.7;
/// Alerts that happened this long before the notifier sees them are not examined.
const RECENT_MICROS: i64 = 15 * 60_000_000;
/// Alerts read at once while looking through that window.
const PAGE: i64 = 500;
/// Alerts whose suspects are read in one round, per webhook: an alert storm in one org holds a
/// round up by this many correlations at most, and its own alerts are reached over the next
/// rounds (newest first: one that fires more than this many new alerts a second for minutes
/// reaches its older ones only as the storm ebbs).
const BUDGET: usize = 200;
/// Alerts remembered as examined, at most: beyond it all are forgotten (examined again later,
/// and stopped from a repeat by the queue's dedup keys).
const MAX_EXAMINED: usize = 200_000;

impl Notifier {
    /// Queues the notifications that are new since the last round.
    pub(super) async fn watch(&mut self) -> Result<(), StorageError> {
        // Alerts out of the window are never read again.
        let since = crate::storage::now_micros() - RECENT_MICROS;
        self.examined.retain(|_, at| *at >= since);
        if self.examined.len() > MAX_EXAMINED {
            self.examined.clear();
        }
        for hook in self.store.webhooks().await? {
            // Set again while its predecessor's attempt is under way: what that attempt
            // carries would read as undelivered and be queued twice. The next round looks.
            if self.attempting_elsewhere(hook.org_id, hook.id) {
                continue;
            }
            if outdated(&hook.release_seen, &self.release) {
                let body = json!({
                    "type": "bridge.release",
                    "org": hook.org,
                    "release": self.release,
                    "previous": hook.release_seen,
                    "message": format!(
                        "Bridge {} is available (your webhook last heard of {}). Upgrade each instance, one at a time: see docs/operations.md, \"Upgrading\".",
                        self.release, hook.release_seen
                    ),
                });
                self.queue(hook.id, format!("release:{}", self.release), body)
                    .await?;
                self.store
                    .webhook_release_seen(hook.id, &self.release)
                    .await?;
            }
            let mut behind: Vec<(String, String, Vec<String>)> = Vec::new();
            for i in self.live.instances(hook.org_id) {
                if !outdated(&i.version, &self.release) {
                    continue;
                }
                match behind
                    .iter_mut()
                    .find(|(b, v, _)| *b == i.bridge && *v == i.version)
                {
                    Some((_, _, ids)) => ids.push(i.id),
                    None => behind.push((i.bridge, i.version, vec![i.id])),
                }
            }
            for (bridge, version, instances) in behind {
                let body = json!({
                    "type": "bridge.outdated",
                    "org": hook.org,
                    "bridge": bridge,
                    "version": version,
                    "release": self.release,
                    "instances": instances,
                    "message": format!(
                        "Bridge {bridge} runs {version}, older than release {}. Upgrade each instance, one at a time: see docs/operations.md, \"Upgrading\".",
                        self.release
                    ),
                });
                let dedup = format!("outdated:{bridge}:{version}:{}", self.release);
                self.queue(hook.id, dedup, body).await?;
            }
            self.strong_suspects(hook.id, hook.org_id, &hook.org)
                .await?;
        }
        Ok(())
    }

    /// Queues the org's new triggered alerts whose top suspect is strong.
    async fn strong_suspects(
        &mut self,
        webhook_id: i64,
        org_id: i64,
        org: &str,
    ) -> Result<(), StorageError> {
        let since = crate::storage::now_micros() - RECENT_MICROS;
        // The whole window, page by page: in an alert storm the newest page alone would hold
        // the same alerts every round, and an older strong suspect would never be looked at.
        // At most `BUDGET` alerts' suspects are read a round; the next round goes on past what
        // this one examined.
        let mut recent = EventQuery {
            kind: Some("alert".into()),
            since: Some(since),
            limit: PAGE,
            ..EventQuery::default()
        };
        let mut budget = BUDGET;
        loop {
            let page = self.store.list_events(org_id, &recent).await?;
            let last = page.last().map(|e| (e.occurred_at, e.id.clone()));
            let whole = page.len() as i64 == PAGE;
            if !self
                .examine(webhook_id, org_id, org, page, &mut budget)
                .await?
            {
                return Ok(());
            }
            match last {
                Some(last) if whole => recent.after = Some(last),
                _ => return Ok(()),
            }
        }
    }

    /// Queues, of a page of the org's recent alerts, each one not examined before whose top
    /// suspect is strong, while `budget` lasts. Says whether to read on: not once the budget
    /// ran out. An alert correlation cannot answer for now is left for the next round.
    async fn examine(
        &mut self,
        webhook_id: i64,
        org_id: i64,
        org: &str,
        page: Vec<crate::storage::StoredEvent>,
        budget: &mut usize,
    ) -> Result<bool, StorageError> {
        for alert in page {
            let examined = (webhook_id, alert.id.clone());
            if self.examined.contains_key(&examined) {
                continue;
            }
            let triggered = serde_json::from_str::<serde_json::Value>(&alert.body)
                .is_ok_and(|b| b["status"] == "triggered");
            if !triggered {
                self.examined.insert(examined, alert.occurred_at);
                continue;
            }
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            let answer = match self.insight.suspects(org_id, &alert.id).await {
                Ok(answer) => answer,
                Err(NoSuspects::Unavailable(_)) => continue,
                Err(NoSuspects::NotAnAlert) => {
                    self.examined.insert(examined, alert.occurred_at);
                    continue;
                }
            };
            self.examined.insert(examined, alert.occurred_at);
            let top = &answer["suspects"][0];
            let score = top["score"].as_f64().unwrap_or(0.0);
            if score < STRONG_SUSPECT {
                continue;
            }
            let body = json!({
                "type": "alert.suspect",
                "org": org,
                "alert": answer["alert"],
                "suspect": top,
                "message": suspect_message(&answer["alert"], top, score),
            });
            // Once per incident and suspect: an alert firing again (same dedupKey, or service
            // and title) with the same suspect is not sent again.
            let a = &answer["alert"];
            let incident = match a["dedupKey"].as_str() {
                Some(key) => format!("key:{key}"),
                None => format!("{}/{}", text(a, "service"), text(a, "title")),
            };
            let dedup = format!("suspect:{incident}:{}", text(&top["event"], "id"));
            self.queue(webhook_id, dedup, body).await?;
        }
        Ok(true)
    }

    /// Queues one notification unless it was queued before (here or by an earlier process).
    async fn queue(
        &mut self,
        webhook_id: i64,
        dedup: String,
        mut body: serde_json::Value,
    ) -> Result<(), StorageError> {
        let key = (webhook_id, dedup);
        if self.queued.contains(&key) {
            return Ok(());
        }
        body["id"] = json!(uuid::Uuid::new_v4().to_string());
        body["createdAt"] = json!(crate::time::format_millis(chrono::Utc::now()));
        if self
            .store
            .queue_delivery(webhook_id, &key.1, &body.to_string())
            .await?
        {
            tracing::info!(webhook_id, notification = %key.1, "webhook notification queued");
        }
        self.queued.insert(key);
        Ok(())
    }
}

/// The string member `key` of `value`, or `""`.
fn text(value: &serde_json::Value, key: &str) -> String {
    value[key].as_str().unwrap_or("").to_string()
}

/// The one line of an `alert.suspect` notification: `api alert "Error rate": probably
/// deployment api v2 (score 1): deployed 10 min before the alert; …`. A suspect without a
/// version (a change) is named by the words it has, its summary quoted.
fn suspect_message(alert: &serde_json::Value, top: &serde_json::Value, score: f64) -> String {
    let mut suspect: Vec<String> = ["type", "service", "version"]
        .iter()
        .map(|k| text(&top["event"], k))
        .filter(|w| !w.is_empty())
        .collect();
    let summary = text(&top["event"], "summary");
    if text(&top["event"], "type") == "change" && !summary.is_empty() {
        let mut cut: String = summary.chars().take(80).collect();
        if cut.len() < summary.len() {
            cut.push('…');
        }
        suspect.push(format!("{cut:?}"));
    }
    let reasons: Vec<&str> = top["reasons"]
        .as_array()
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    format!(
        "{} alert \"{}\": probably {} (score {score}): {}",
        text(alert, "service"),
        text(alert, "title"),
        suspect.join(" "),
        reasons.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspect_is_named_by_the_words_it_has() {
        let alert = json!({"service": "api", "title": "Error rate"});
        let deployment = json!({"event": {"type": "deployment", "service": "api", "version": "v2"},
            "reasons": ["deployed 10 min before the alert", "same service"]});
        assert_eq!(
            suspect_message(&alert, &deployment, 1.0),
            "api alert \"Error rate\": probably deployment api v2 (score 1): deployed 10 min before the alert; same service"
        );
        let change = json!({"event": {"type": "change", "service": "syn", "summary": "Flag on"},
            "reasons": ["same service"]});
        assert_eq!(
            suspect_message(&alert, &change, 0.8),
            "api alert \"Error rate\": probably change syn \"Flag on\" (score 0.8): same service"
        );
    }
}
