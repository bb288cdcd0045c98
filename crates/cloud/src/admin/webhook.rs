//! `cloud webhook set` and `remove`: an org's webhook from a script, as an admin sets it on the
//! dashboard's Notifications page (the same checks, the same audit entries), so that a
//! deployment's automation can point its notifications somewhere without a browser.

use super::{AdminError, org};
use crate::storage::{Actor, Store};

/// What `cloud webhook set` was given.
pub struct WebhookUrl<'a> {
    /// The URL as typed.
    pub url: &'a str,
    /// Accept a literal non-public address, as `cloud serve --webhook-allow-private` delivers
    /// to one.
    pub allow_private: bool,
    /// The Bridge release the webhook has heard of (the `serve`'s `--bridge-release`).
    pub release: &'a str,
}

/// The URL as deliveries will use it, or why they would refuse it (a literal address only: no
/// name is looked up), said as the option that was given.
pub fn webhook_url(given: &WebhookUrl<'_>) -> Result<String, AdminError> {
    crate::notify::guard::webhook_url(given.url, given.allow_private).map_err(|why| {
        let flag = if why.contains("--webhook-allow-private") {
            " (give this command --webhook-allow-private as well)"
        } else {
            ""
        };
        // The check's words start with `url`: said as the option that was given.
        let why = why.strip_prefix("url").unwrap_or(&why);
        AdminError::Usage(format!("--url{why}{flag}"))
    })
}

/// `cloud webhook set`: returns the new signing secret (shown this once).
pub async fn set_webhook(
    store: &Store,
    actor: &Actor,
    slug: &str,
    given: WebhookUrl<'_>,
) -> Result<String, AdminError> {
    let url = webhook_url(&given)?;
    let org_id = org(store, slug).await?;
    let secret = crate::secrets::new_webhook_secret();
    store
        .set_webhook(org_id, &url, &secret, given.release)
        .await?;
    // The origin only: a webhook's path or query often carries a token.
    let origin = crate::notify::origin_only(&url);
    store.audit(org_id, actor, "webhook.set", &origin).await?;
    Ok(secret)
}

/// `cloud webhook remove`: returns the removed webhook's origin.
pub async fn remove_webhook(
    store: &Store,
    actor: &Actor,
    slug: &str,
) -> Result<String, AdminError> {
    let org_id = org(store, slug).await?;
    let Some(url) = store.remove_webhook(org_id).await? else {
        return Err(AdminError::Usage(format!(
            "org {slug:?} has no webhook to remove"
        )));
    };
    let origin = crate::notify::origin_only(&url);
    store
        .audit(org_id, actor, "webhook.remove", &origin)
        .await?;
    Ok(format!("removed the webhook to {origin}"))
}
