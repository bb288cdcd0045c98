//! Delivery: a signed POST per due notification; a 2xx answer delivers it, anything else (or
//! no answer within [`ATTEMPT_TIMEOUT`]) reschedules it after the back-off, until
//! [`MAX_ATTEMPTS`].

use std::time::Duration;

use super::{Notifier, sign};
use crate::storage::{Delivery, StorageError, Store, Webhook, now_micros};

/// Attempts under way, each recording its own outcome as it ends.
pub(super) type InFlight = tokio::task::JoinSet<()>;
/// The (org, webhook) of each attempt under way, shared with the attempts' tasks.
pub(super) type Busy = std::sync::Arc<std::sync::Mutex<Vec<(i64, i64)>>>;
/// Attempts under way at most; more due ones wait for the next rounds.
const MAX_IN_FLIGHT: usize = 64;
/// Attempts under way to one webhook at most: one receiver's backlog leaves room for others'.
const MAX_PER_WEBHOOK: usize = 8;

/// One attempt's entry in [`Busy`], removed when the attempt ends, however it ends.
struct Slot {
    busy: Busy,
    entry: (i64, i64),
}

impl Slot {
    fn take(busy: &Busy, entry: (i64, i64)) -> Slot {
        lock(busy).push(entry);
        Slot {
            busy: busy.clone(),
            entry,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut busy = lock(&self.busy);
        if let Some(i) = busy.iter().position(|e| *e == self.entry) {
            busy.swap_remove(i);
        }
    }
}

fn lock(busy: &Busy) -> std::sync::MutexGuard<'_, Vec<(i64, i64)>> {
    busy.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts before a notification is given up.
pub const MAX_ATTEMPTS: i64 = 8;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// The HTTP client of deliveries: public CAs (the system's, else the embedded set), and public
/// addresses only unless `allow_private`.
pub(super) fn client(allow_private: bool) -> reqwest::Client {
    let tls = rustls::ClientConfig::builder_with_provider(tunnel::tls::provider())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(tunnel::roots::public())
                .with_no_client_auth()
        });
    let builder = reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("signals-cloud/", env!("CARGO_PKG_VERSION")));
    let builder = match tls {
        Ok(config) => builder.tls_backend_preconfigured(config),
        Err(_) => builder,
    };
    // Without `allow_private`, no proxy either: a proxy would connect wherever it is asked,
    // past the resolver that keeps webhooks on public addresses.
    let builder = if allow_private {
        builder
    } else {
        builder.no_proxy().dns_resolver(super::guard::PublicOnly)
    };
    builder.build().unwrap_or_default()
}

/// The wait after the `attempts`-th failed attempt: `first`, doubled each time, at most an hour.
pub fn backoff(first: Duration, attempts: i64) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
    first.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

impl Notifier {
    /// Starts an attempt for every due delivery. Attempts run side by side and outlive the
    /// round, each recording its outcome as it ends (a notification delivered reads as such at
    /// once, so a webhook set again meanwhile does not get it twice): one org's receiver that
    /// does not answer (for up to [`ATTEMPT_TIMEOUT`]) delays no other org's, nor the queueing
    /// of new notifications.
    pub(super) async fn send_due(&mut self) -> Result<(), StorageError> {
        while let Some(ended) = self.in_flight.try_join_next() {
            if let Err(e) = ended
                && e.is_panic()
            {
                tracing::error!(cause = %e, "a webhook delivery attempt failed unexpectedly; it is attempted again once its claim runs out");
            }
        }
        let room = MAX_IN_FLIGHT.saturating_sub(self.in_flight.len()).min(32);
        if room == 0 {
            return Ok(());
        }
        let mut per_webhook: std::collections::HashMap<i64, usize> = Default::default();
        for (_, webhook) in lock(&self.busy).iter() {
            *per_webhook.entry(*webhook).or_default() += 1;
        }
        let full: Vec<i64> = (per_webhook.iter())
            .filter(|(_, n)| **n >= MAX_PER_WEBHOOK)
            .map(|(id, _)| *id)
            .collect();
        let due = self.store.due_deliveries(room as i64, &full).await?;
        if due.is_empty() {
            return Ok(());
        }
        let hooks = self.store.webhooks().await?;
        let mut claimed = Vec::new();
        for delivery in due {
            let Some(hook) = hooks.iter().find(|h| h.id == delivery.webhook_id) else {
                self.store
                    .delivery_attempted(delivery.id, Some("webhook removed"), None)
                    .await?;
                continue;
            };
            let under_way = per_webhook.entry(hook.id).or_default();
            if *under_way >= MAX_PER_WEBHOOK {
                continue;
            }
            // Another process on the same database may have taken it: skip it then.
            let lease = i64::try_from((ATTEMPT_TIMEOUT * 3).as_micros()).unwrap_or(i64::MAX);
            let due = delivery.next_attempt_at.unwrap_or_default();
            if self.store.claim_delivery(delivery.id, due, lease).await? {
                *under_way += 1;
                claimed.push((hook.clone(), delivery));
            }
        }
        for (hook, delivery) in claimed {
            let (client, allow_private) = (self.client.clone(), self.allow_private);
            let (store, first_retry) = (self.store.clone(), self.first_retry);
            let slot = Slot::take(&self.busy, (hook.org_id, hook.id));
            self.in_flight.spawn(async move {
                let _slot = slot;
                let outcome =
                    attempt(&client, allow_private, &hook.url, &hook.secret, &delivery).await;
                // Not recorded, it is attempted again once its claim runs out, with its id.
                if let Err(e) = record(&store, first_retry, &hook, &delivery, outcome).await {
                    store.background_failure(&e, "cannot record a webhook delivery's outcome");
                }
            });
        }
        Ok(())
    }

    /// Whether an attempt to another webhook of `org_id` than `webhook_id` is under way: one
    /// set again (replaced) while its predecessor's attempt waits for an answer. Until that
    /// attempt is recorded, what it carries reads as not delivered.
    pub(super) fn attempting_elsewhere(&self, org_id: i64, webhook_id: i64) -> bool {
        lock(&self.busy)
            .iter()
            .any(|(org, webhook)| *org == org_id && *webhook != webhook_id)
    }
}

/// Stores how an attempt ended: delivered, to be retried after the back-off, or given up.
async fn record(
    store: &Store,
    first_retry: Duration,
    hook: &Webhook,
    delivery: &Delivery,
    outcome: Result<(), String>,
) -> Result<(), StorageError> {
    let attempts = delivery.attempts + 1;
    match outcome {
        Ok(()) => {
            tracing::info!(
                webhook_id = hook.id,
                delivery = delivery.id,
                attempts,
                "webhook notification delivered"
            );
            store.delivery_attempted(delivery.id, None, None).await?;
        }
        Err(why) => {
            let retry_at = (attempts < MAX_ATTEMPTS).then(|| {
                now_micros()
                    + i64::try_from(backoff(first_retry, attempts).as_micros())
                        .unwrap_or(i64::MAX / 2)
            });
            match retry_at {
                Some(_) => {
                    tracing::warn!(webhook_id = hook.id, delivery = delivery.id, attempts, cause = %why, "webhook delivery failed; it will be retried")
                }
                None => {
                    tracing::error!(webhook_id = hook.id, delivery = delivery.id, attempts, cause = %why, "webhook delivery failed {MAX_ATTEMPTS} times; given up (the dashboard's Notifications page shows it)")
                }
            }
            store
                .delivery_attempted(delivery.id, Some(&why), retry_at)
                .await?;
        }
    }
    Ok(())
}

/// One attempt: the signed POST, `Ok` on a 2xx answer.
async fn attempt(
    client: &reqwest::Client,
    allow_private: bool,
    url: &str,
    secret: &str,
    delivery: &Delivery,
) -> Result<(), String> {
    // Errors are stored and shown to every member, and logged: they name the receiver by its
    // origin only, since a webhook URL's path often holds a token.
    let shown = super::origin_only(url);
    if !allow_private {
        super::guard::host_allowed(url).map_err(|why| format!("POST {shown}: {why}"))?;
    }
    let t = chrono::Utc::now().timestamp();
    let answer = client
        .post(url)
        .header("content-type", "application/json")
        .header(
            "signature",
            sign::signature(secret, t, delivery.body.as_bytes()),
        )
        .body(delivery.body.clone())
        .send()
        .await
        .map_err(|e| {
            // reqwest's own text hides the cause ("error sending request"): show the chain,
            // or only the guard's refusal when that is the cause.
            let e = e.without_url();
            let mut text = format!("POST {shown}: {e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                if let Some(refused) = c.downcast_ref::<super::guard::NotPublic>() {
                    return format!("POST {shown}: {refused}");
                }
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            if text.contains("UnknownIssuer") || text.contains("CaUsedAsEndEntity") {
                text.push_str(" (the receiver's certificate is signed by no CA this cloud trusts: the system's, or the set compiled into cloud; give the receiver a certificate from a public CA)");
            }
            text
        })?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("POST {shown}: answered {}", answer.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        let first = Duration::from_secs(10);
        assert_eq!(backoff(first, 1), Duration::from_secs(10));
        assert_eq!(backoff(first, 2), Duration::from_secs(20));
        assert_eq!(backoff(first, 4), Duration::from_secs(80));
        assert_eq!(backoff(first, 30), MAX_BACKOFF);
    }
}
