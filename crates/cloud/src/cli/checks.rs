//! An admin command's own values, checked before its storage is opened, and the storage it
//! works on: what `cloud`'s `main` needs to say every mistake of one run at once.

use crate::admin;

use super::{
    BridgeTokenCommand, Command, KeyCommand, OrgCommand, StorageArgs, UserCommand, WebhookCommand,
};

impl Command {
    /// Mistakes in an admin command's own values (a slug, a name, an email, a link's address, a
    /// webhook URL), found before its storage is opened: a script learns of them on a machine
    /// without a database too, together with its absence, not one run after the other.
    pub fn value_problems(&self) -> Vec<String> {
        let found: Vec<Result<(), admin::AdminError>> = match self {
            Command::Serve(_) | Command::DbProxy(_) | Command::Org(OrgCommand::List { .. }) => {
                Vec::new()
            }
            Command::Org(OrgCommand::Create { slug, .. }) => {
                vec![admin::check_name("org slug", slug)]
            }
            Command::SignalKey(KeyCommand::Create { org, name, .. })
            | Command::ApiKey(KeyCommand::Create { org, name, .. }) => vec![
                admin::check_org(org),
                name.as_deref().map_or(Ok(()), admin::check_label),
            ],
            Command::SignalKey(KeyCommand::List { org, .. } | KeyCommand::Revoke { org, .. })
            | Command::ApiKey(KeyCommand::List { org, .. } | KeyCommand::Revoke { org, .. })
            | Command::BridgeToken(BridgeTokenCommand::List { org, .. })
            | Command::Webhook(WebhookCommand::Remove { org, .. }) => vec![admin::check_org(org)],
            Command::BridgeToken(BridgeTokenCommand::Create { org, name, .. }) => vec![
                admin::check_org(org),
                admin::check_name("bridge name", name),
            ],
            Command::BridgeToken(BridgeTokenCommand::Revoke { org, name, id, .. }) => vec![
                admin::check_org(org),
                admin::check_name("bridge name", name),
                admin::bridge_token_id(org, id.as_deref()).map(drop),
            ],
            Command::User(UserCommand::Create {
                org, email, link, ..
            }) => vec![
                admin::check_org(org),
                admin::email(email).map(drop),
                admin::link_base(link.public_url.as_deref(), &link.listen).map(drop),
            ],
            Command::User(UserCommand::ResetPassword { email, link, .. }) => vec![
                admin::email(email).map(drop),
                admin::link_base(link.public_url.as_deref(), &link.listen).map(drop),
            ],
            Command::Webhook(WebhookCommand::Set {
                org,
                url,
                webhook_allow_private,
                bridge_release,
                ..
            }) => vec![
                admin::check_org(org),
                admin::webhook_url(&admin::WebhookUrl {
                    url,
                    allow_private: *webhook_allow_private,
                    release: bridge_release,
                })
                .map(drop),
            ],
        };
        found
            .into_iter()
            .filter_map(|r| r.err().map(|e| e.to_string()))
            .collect()
    }

    /// The storage an admin command works on.
    pub fn storage(&self) -> Option<&StorageArgs> {
        Some(match self {
            Command::Serve(_) | Command::DbProxy(_) => return None,
            Command::Org(OrgCommand::Create { storage, .. } | OrgCommand::List { storage, .. })
            | Command::SignalKey(
                KeyCommand::Create { storage, .. }
                | KeyCommand::List { storage, .. }
                | KeyCommand::Revoke { storage, .. },
            )
            | Command::ApiKey(
                KeyCommand::Create { storage, .. }
                | KeyCommand::List { storage, .. }
                | KeyCommand::Revoke { storage, .. },
            )
            | Command::BridgeToken(
                BridgeTokenCommand::Create { storage, .. }
                | BridgeTokenCommand::List { storage, .. }
                | BridgeTokenCommand::Revoke { storage, .. },
            )
            | Command::User(
                UserCommand::Create { storage, .. } | UserCommand::ResetPassword { storage, .. },
            )
            | Command::Webhook(
                WebhookCommand::Set { storage, .. } | WebhookCommand::Remove { storage, .. },
            ) => storage,
        })
    }
}

/// Problems found together, said in one message: one as itself, several as `N problems{what}:`
/// and a line each.
pub fn together(problems: &[String], what: &str) -> String {
    match problems {
        [one] => one.clone(),
        all => format!("{} problems{what}:\n  {}", all.len(), all.join("\n  ")),
    }
}
