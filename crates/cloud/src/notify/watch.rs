//! What to notify: each bridge of an org that has a connected instance older than the
//! release (once per bridge, running version and release), and each release newer than the one
//! a webhook last heard of.

use serde_json::json;

use super::Notifier;
use crate::live::outdated;
use crate::storage::StorageError;

impl Notifier {
    /// Queues the notifications that are new since the last round.
    pub(super) async fn watch(&mut self) -> Result<(), StorageError> {
        for hook in self.store.webhooks().await? {
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
        }
        Ok(())
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
