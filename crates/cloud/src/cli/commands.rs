//! The admin commands' arguments: `org`, `signal-key`, `api-key`, `bridge-token`, `user` and
//! `webhook`, each the subcommands clap parses into.

use std::net::SocketAddr;

use clap::{Args, Subcommand, ValueEnum};

use super::{StorageArgs, switch};
use crate::admin::Output;

/// A key's label: one line of text that `list` can show in its column.
fn label(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() {
        Err("the name is blank: give a label, or leave --name out".into())
    } else {
        crate::admin::check_label(name).map_err(|e| e.to_string())?;
        Ok(name.to_string())
    }
}

fn socket_address(raw: &str) -> Result<String, String> {
    raw.trim()
        .parse::<SocketAddr>()
        .map(|_| raw.trim().to_string())
        .map_err(|_| {
            format!(
                "{raw:?} is not an address and port, such as 127.0.0.1:8443 (for a host name, give the link's base with --public-url)"
            )
        })
}

/// `cloud org …`.
#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create an organisation; prints its slug.
    Create {
        /// Lowercase name, e.g. acme.
        slug: String,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// List the organisations.
    List {
        /// text (a table) or json (an array of {"createdAt","id","slug"}).
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// `cloud signal-key …` and `cloud api-key …`.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a key; prints it alone.
    Create {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// A label for humans (one line, at most 200 characters).
        #[arg(long, env = "CLOUD_KEY_NAME", value_parser = label)]
        name: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// List the org's live keys: id, name, created, last used (never a secret).
    List {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// text (a table) or json (an array of {"createdAt","id","lastUsedAt","name"}).
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Revoke a key by the id `list` shows; a running server stops accepting it within a second or two.
    Revoke {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// The key's id, as `list` shows it, or the whole key.
        id: String,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// `cloud bridge-token …`.
#[derive(Debug, Subcommand)]
pub enum BridgeTokenCommand {
    /// Create a token for a bridge; prints it alone, this once.
    Create {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// The bridge's name (SERVICE_BRIDGE_NAME).
        #[arg(long, env = "CLOUD_BRIDGE_NAME")]
        name: String,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// List the org's live bridge tokens: id, bridge, created, last used (never a secret).
    List {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// text (a table) or json (an array of {"createdAt","id","lastUsedAt","name"}).
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Revoke every token of a bridge, or only the one with id ID (to rotate: create a new
    /// token, move the instances to it, then revoke the old one by its id); the live tunnels
    /// of a revoked token are closed.
    Revoke {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// The bridge's name.
        #[arg(long, env = "CLOUD_BRIDGE_NAME")]
        name: String,
        /// Only this token (its id, as `list` shows it, or the whole token); without it, every
        /// token of the bridge.
        id: Option<String>,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// `cloud webhook …`.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Set the org's webhook, replacing any previous one; prints its new signing secret alone,
    /// this once.
    Set {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// Where notifications are POSTed: https:// or http://, no user name or password in it
        /// (from CLOUD_WEBHOOK_URL, a URL with a token in it stays out of `ps`).
        #[arg(long, env = "CLOUD_WEBHOOK_URL", hide_env_values = true)]
        url: String,
        /// Accept a literal non-public address or a `localhost` name, as `cloud serve
        /// --webhook-allow-private` delivers to one.
        #[arg(long, env = "CLOUD_WEBHOOK_ALLOW_PRIVATE", value_parser = switch)]
        webhook_allow_private: bool,
        /// The Bridge release the webhook starts from, as the `serve` beside it ships
        /// (its --bridge-release), so that it is told only of newer ones.
        #[arg(long, env = "CLOUD_BRIDGE_RELEASE", default_value = crate::live::VERSION, value_parser = crate::live::parse_release)]
        bridge_release: String,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Remove the org's webhook; its queued deliveries stop.
    Remove {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// Where set-password links point.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// The dashboard's address as users reach it, e.g. https://signals.example.com; links
    /// start with it. Default: https:// and the TLS listen address (--listen).
    #[arg(long, env = "CLOUD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The TLS listen address, for the default --public-url.
    #[arg(long, env = "CLOUD_LISTEN", default_value = "127.0.0.1:8443", value_parser = socket_address)]
    pub listen: String,
}

/// `cloud user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user of an org; prints a one-time set-password link (valid 24 hours).
    Create {
        /// The org's slug.
        #[arg(long, env = "CLOUD_ORG")]
        org: String,
        /// The user's email, unique across the service.
        #[arg(long)]
        email: String,
        /// admin (manages keys, bridge tokens, webhooks and repository mappings) or member (reads).
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Where the link points.
        #[command(flatten)]
        link: LinkArgs,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Print a new set-password link for a user (valid 24 hours); the password stays until
    /// the link is used, and using it signs the user out everywhere.
    ResetPassword {
        /// The user's email.
        #[arg(long)]
        email: String,
        /// Where the link points.
        #[command(flatten)]
        link: LinkArgs,
        /// Storage.
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// A user's role on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Manages keys, tokens and users.
    Admin,
    /// Reads.
    Member,
}
