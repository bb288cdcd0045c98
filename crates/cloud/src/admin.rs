//! Admin commands: create, list and revoke orgs' signal keys, API keys and bridge tokens, set
//! their webhooks ([`webhook`]) and make their users' set-password links ([`users`]).
//! `create` prints only the new value on stdout, so scripts can capture it; secrets are shown
//! this once and stored hashed, and `list` shows ids, never secrets. Every change is recorded
//! in the org's audit with its [`Actor`]: the dashboard's user, or `cli:USER` for a command.

use serde_json::json;

mod users;
mod webhook;
pub use users::{LINK_VALIDITY, create_user, email, link_base, reset_password};
pub use webhook::{WebhookUrl, remove_webhook, set_webhook, webhook_url};

use crate::secrets::{self, Kind};
use crate::storage::{Actor, Credential, StorageError, Store};

/// An admin command failure.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Bad input (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Checks an org slug or bridge name against [`tunnel::is_valid_bridge_name`].
pub fn check_name(what: &str, name: &str) -> Result<(), AdminError> {
    if tunnel::is_valid_bridge_name(name) {
        Ok(())
    } else {
        Err(AdminError::Usage(format!(
            "{what} {name:?} is not valid: use {}{}",
            tunnel::BRIDGE_NAME_RULE,
            lowercase_guess(name)
        )))
    }
}

/// `; did you mean "acme"?` for `ACME` (or ` acme `), when that form is a valid name.
fn lowercase_guess(name: &str) -> String {
    let guess = name.trim().to_ascii_lowercase();
    match tunnel::is_valid_bridge_name(&guess) {
        true => format!("; did you mean {guess:?}?"),
        false => String::new(),
    }
}

/// How `list` commands print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Output {
    /// A table for people.
    #[default]
    Text,
    /// A JSON array for scripts.
    Json,
}

/// Checks a key's label: one line of text, at most 200 characters, that `list` and the
/// dashboard can show in a column without a control character or a text-direction mark
/// rearranging what is shown around it.
pub fn check_label(name: &str) -> Result<(), AdminError> {
    if name.chars().any(|c| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}')
            || crate::signals::links::invisible(c)
    }) {
        Err(AdminError::Usage("the name holds a control character (a line break, a tab, a text-direction mark): give one line of text".into()))
    } else if name.chars().count() > 200 {
        Err(AdminError::Usage(format!(
            "the name is {} characters; at most 200",
            name.chars().count()
        )))
    } else {
        Ok(())
    }
}

/// Refuses an `--org` that no org can have: empty (clap takes `--org ''`), or outside the
/// slug rule (`ACME` for `acme`), before any storage is opened.
pub fn check_org(slug: &str) -> Result<(), AdminError> {
    if slug.is_empty() {
        return Err(AdminError::Usage(
            "--org is empty: give an org's slug (`cloud org list` shows them)".into(),
        ));
    }
    if !tunnel::is_valid_bridge_name(slug) {
        return Err(AdminError::Usage(format!(
            "--org {slug:?} is not an org slug: expected {}{} (`cloud org list` shows the orgs)",
            tunnel::BRIDGE_NAME_RULE,
            lowercase_guess(slug)
        )));
    }
    Ok(())
}

async fn org(store: &Store, slug: &str) -> Result<i64, AdminError> {
    check_org(slug)?;
    store.org_id(slug).await?.ok_or_else(|| {
        AdminError::Usage(format!(
            "no org {slug:?}: `cloud org list` shows the orgs there are, `cloud org create {slug}` makes it"
        ))
    })
}

/// `cloud org create SLUG`: returns the slug.
pub async fn create_org(store: &Store, actor: &Actor, slug: &str) -> Result<String, AdminError> {
    check_name("org slug", slug)?;
    match store.create_org(slug).await {
        Ok(id) => {
            store.audit(id, actor, "org.create", slug).await?;
            Ok(slug.to_string())
        }
        Err(StorageError::Exists { .. }) => {
            Err(AdminError::Usage(format!("org {slug:?} exists already")))
        }
        Err(e) => Err(e.into()),
    }
}

/// `cloud signal-key create`: returns the new signal key.
pub async fn create_signal_key(
    store: &Store,
    actor: &Actor,
    slug: &str,
    name: Option<&str>,
) -> Result<String, AdminError> {
    name.map(check_label).transpose()?;
    let org_id = org(store, slug).await?;
    let key = secrets::new_signal_key();
    store.create_signal_key(org_id, &key, name).await?;
    store
        .audit(org_id, actor, "signal_key.create", &key)
        .await?;
    Ok(key)
}

/// `cloud api-key create`: returns the new API key (shown once).
pub async fn create_api_key(
    store: &Store,
    actor: &Actor,
    slug: &str,
    name: Option<&str>,
) -> Result<String, AdminError> {
    name.map(check_label).transpose()?;
    let org_id = org(store, slug).await?;
    let minted = secrets::mint(Kind::ApiKey);
    store
        .create_api_key(org_id, &minted.id, name, &minted.hash)
        .await?;
    let id = format!("{}{}", Kind::ApiKey.prefix(), minted.id);
    store.audit(org_id, actor, "api_key.create", &id).await?;
    Ok(minted.token)
}

/// `cloud bridge-token create`: returns the new bridge token (shown once).
pub async fn create_bridge_token(
    store: &Store,
    actor: &Actor,
    slug: &str,
    bridge: &str,
) -> Result<String, AdminError> {
    check_name("bridge name", bridge)?;
    let org_id = org(store, slug).await?;
    let minted = secrets::mint(Kind::BridgeToken);
    store
        .create_bridge_token(org_id, &minted.id, bridge, &minted.hash)
        .await?;
    store
        .audit(org_id, actor, "bridge_token.create", bridge)
        .await?;
    Ok(minted.token)
}

/// The bare id of `bridge-token revoke ID`: given as `list` shows it (`sigbrt_…`) or bare; a
/// whole token is cut at its secret, which is neither echoed nor audited. Anything but an id's
/// 16 hex digits (a token mangled in pasting, a secret alone) is refused without being
/// repeated.
pub fn bridge_token_id<'a>(
    slug: &str,
    only: Option<&'a str>,
) -> Result<Option<&'a str>, AdminError> {
    let bare = only.map(|id| {
        let id = id.trim();
        let id = id.strip_prefix(Kind::BridgeToken.prefix()).unwrap_or(id);
        id.split('_').next().unwrap_or(id)
    });
    if bare.is_some_and(|id| id.len() != 16 || !id.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(AdminError::Usage(format!(
            "that is not a bridge token's id: expected {} and 16 hex digits (or the 16 hex digits alone), as `cloud bridge-token list --org {slug}` shows them",
            Kind::BridgeToken.prefix()
        )));
    }
    Ok(bare)
}

/// `cloud bridge-token revoke`: every live token of the bridge, or the one whose id is `only`
/// (`bridge-token list` shows ids); returns what the command prints: the id revoked, or how
/// many tokens were.
pub async fn revoke_bridge_tokens(
    store: &Store,
    actor: &Actor,
    slug: &str,
    bridge: &str,
    only: Option<&str>,
) -> Result<String, AdminError> {
    let bare = bridge_token_id(slug, only)?;
    let org_id = org(store, slug).await?;
    let n = store.revoke_bridge_tokens(org_id, bridge, bare).await?;
    let shown = bare.map(|id| format!("{}{id}", Kind::BridgeToken.prefix()));
    if n == 0 {
        // A live token of another bridge of the org: said, so that the right --name is clear.
        let owner = match &shown {
            Some(id) => (store.credentials(org_id, Credential::BridgeToken).await?)
                .into_iter()
                .find(|t| &t.id == id)
                .and_then(|t| t.name),
            None => None,
        };
        return Err(AdminError::Usage(match (&shown, owner) {
            (None, _) => format!("bridge {bridge:?} of org {slug:?} has no live token to revoke"),
            (Some(id), Some(owner)) => format!(
                "{id} is a token of bridge {owner:?}, not {bridge:?}: revoke it with --name {owner}"
            ),
            (Some(id), None) => format!(
                "bridge {bridge:?} of org {slug:?} has no live token {id:?}; `cloud bridge-token list --org {slug}` shows the ids"
            ),
        }));
    }
    let target = match &shown {
        None => bridge.to_string(),
        Some(id) => format!("{bridge} {id}"),
    };
    store
        .audit(org_id, actor, "bridge_token.revoke", &target)
        .await?;
    // As `api-key revoke` says it: the id revoked; or, for every token, how many.
    Ok(match shown {
        Some(id) => format!("revoked {id} (bridge {bridge})"),
        None => format!("revoked {n} token(s) of bridge {bridge}"),
    })
}

/// `cloud org list`: each org's slug, id (what a bridge's audit records call `org`) and
/// creation time, as text or JSON.
pub async fn list_orgs(store: &Store, output: Output) -> Result<String, AdminError> {
    let orgs = store.orgs().await?;
    Ok(match output {
        Output::Json => serde_json::Value::Array(
            orgs.iter()
                .map(|o| json!({"slug": o.slug, "id": o.id.to_string(), "createdAt": time(o.created_at)}))
                .collect(),
        )
        .to_string(),
        Output::Text => {
            let mut out = format!("{:<24} {:<8} created", "slug", "id");
            for o in &orgs {
                out.push_str(&format!("\n{:<24} {:<8} {}", o.slug, o.id, time(o.created_at)));
            }
            out
        }
    })
}

/// `cloud api-key|signal-key|bridge-token list`: the org's live credentials of `kind`.
pub async fn list_keys(
    store: &Store,
    slug: &str,
    kind: Credential,
    output: Output,
) -> Result<String, AdminError> {
    let org_id = org(store, slug).await?;
    let keys = store.credentials(org_id, kind).await?;
    Ok(match output {
        Output::Json => serde_json::Value::Array(
            keys.iter()
                .map(|k| {
                    json!({
                        "id": k.id,
                        "name": k.name,
                        "createdAt": time(k.created_at),
                        "lastUsedAt": k.last_used_at.map(time),
                    })
                })
                .collect(),
        )
        .to_string(),
        Output::Text => {
            let rows: Vec<[String; 4]> = keys
                .iter()
                .map(|k| {
                    [
                        k.id.clone(),
                        k.name.clone().unwrap_or_else(|| "-".to_string()),
                        time(k.created_at),
                        k.last_used_at.map_or_else(|| "never".to_string(), time),
                    ]
                })
                .collect();
            if rows.is_empty() {
                let (what, command) = match kind {
                    Credential::ApiKey => ("API keys", "api-key create --org"),
                    Credential::SignalKey => ("signal keys", "signal-key create --org"),
                    Credential::BridgeToken => {
                        ("bridge tokens", "bridge-token create --name BRIDGE --org")
                    }
                };
                return Ok(format!(
                    "no live {what} in org {slug:?}; `cloud {command} {slug}` makes one"
                ));
            }
            let header = ["id", "name", "created", "last used"].map(String::from);
            // Columns as wide as their longest cell, so a long name never shifts the next one.
            let width = |c: usize| {
                rows.iter()
                    .chain([&header])
                    .map(|r| r[c].chars().count())
                    .max()
            };
            let widths = [0, 1, 2].map(|c| width(c).unwrap_or(0));
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| {
                    format!(
                        "{:<w0$} {:<w1$} {:<w2$} {}",
                        r[0],
                        r[1],
                        r[2],
                        r[3],
                        w0 = widths[0],
                        w1 = widths[1],
                        w2 = widths[2]
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
    })
}

/// Where a refused revocation sends the operator for the ids (the dashboard says its own).
pub const LIST_HINT: &str = "`list` shows the ids";

/// The public part of a credential given with its secret (an API key or a bridge token, whole
/// or mangled), with its kind.
fn public_part(given: &str) -> Option<(Kind, String)> {
    [Kind::ApiKey, Kind::BridgeToken].into_iter().find_map(|k| {
        let (key_id, _secret) = given.strip_prefix(k.prefix())?.split_once('_')?;
        Some((k, format!("{}{key_id}", k.prefix())))
    })
}

/// A key's id as a page may show it back: a whole credential pasted in its place becomes its
/// public part, so that its secret is never echoed.
pub fn shown_id(given: &str) -> String {
    public_part(given.trim()).map_or_else(|| given.trim().to_string(), |(_, public)| public)
}

/// `cloud api-key|signal-key revoke --org SLUG ID`: returns what was revoked.
pub async fn revoke_key(
    store: &Store,
    actor: &Actor,
    slug: &str,
    kind: Credential,
    id: &str,
) -> Result<String, AdminError> {
    let org_id = org(store, slug).await?;
    // A credential with its secret (whole, or mangled: a space, a digit short) is never
    // echoed nor audited past its public part; a whole API key is revoked by its id.
    let given = id.trim();
    let public = public_part(given);
    let (id, hidden) = match &public {
        Some((Kind::ApiKey, public)) if kind == Credential::ApiKey => (public.as_str(), None),
        Some((other, public)) => (given, Some((*other, public.as_str()))),
        None => (given, None),
    };
    let bare = match kind {
        Credential::ApiKey => id.strip_prefix(Kind::ApiKey.prefix()).unwrap_or(id),
        Credential::SignalKey | Credential::BridgeToken => id,
    };
    if !store.revoke_key(org_id, kind, bare).await? {
        let shown = match hidden {
            Some((Kind::ApiKey, public)) => {
                format!("(that is an API key, {public}, with its secret)")
            }
            Some((Kind::BridgeToken, _)) => "(that is a bridge token, with its secret: bridge tokens are revoked with `cloud bridge-token revoke --org ORG --name BRIDGE [ID]`)".to_string(),
            None if kind == Credential::ApiKey
                && id.starts_with(crate::secrets::SIGNAL_KEY_PREFIX) =>
            {
                "(that is a signal key: revoke it with `cloud signal-key revoke --org ORG KEY`)"
                    .to_string()
            }
            None => format!("{id:?}"),
        };
        return Err(AdminError::Usage(format!(
            "org {slug:?} has no live key {shown}; {LIST_HINT}"
        )));
    }
    let action = match kind {
        Credential::ApiKey => "api_key.revoke",
        Credential::SignalKey => "signal_key.revoke",
        Credential::BridgeToken => "bridge_token.revoke",
    };
    store.audit(org_id, actor, action, id).await?;
    Ok(format!("revoked {id}"))
}

/// A stored time (µs) as the server writes times: RFC 3339, UTC, milliseconds.
fn time(micros: i64) -> String {
    crate::time::format_millis(chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default())
}
