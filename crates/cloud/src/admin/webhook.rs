//! `cloud webhook set` and `remove`: an org's webhook from a script, as an admin sets it on the
//! dashboard's Notifications page (the same checks, the same audit entries), so that a
//! deployment's automation can point its notifications somewhere without a browser.

use super::{AdminError, org};
use crate::storage::{Actor, Store};

/// `cloud webhook set`: returns the new signing secret (shown this once). `allow_private`
/// accepts a literal non-public address, as `cloud serve --webhook-allow-private` delivers to one.
pub async fn set_webhook(
    store: &Store,
    actor: &Actor,
    slug: &str,
    url: &str,
    allow_private: bool,
) -> Result<String, AdminError> {
    let url = crate::notify::guard::webhook_url(url, allow_private).map_err(|why| {
        let flag = if why.contains("--webhook-allow-private") {
            " (give this command --webhook-allow-private as well)"
        } else {
            ""
        };
        AdminError::Usage(format!("--url: {why}{flag}"))
    })?;
    let org_id = org(store, slug).await?;
    let secret = crate::secrets::new_webhook_secret();
    // The release the webhook has heard of: this binary's, the default of a `serve` it runs beside.
    store
        .set_webhook(org_id, &url, &secret, crate::live::VERSION)
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
