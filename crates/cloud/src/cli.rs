//! The command line of `cloud` (docs/operations.md, "Command line"). Every option also reads a
//! `CLOUD_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::logging::LogFormat;

mod checks;
mod commands;
mod hints;
mod serve;

pub use checks::together;
pub use commands::{
    BridgeTokenCommand, KeyCommand, LinkArgs, OrgCommand, RoleArg, UserCommand, WebhookCommand,
};
pub use hints::env_notes;
use hints::{blank_env, env_behind, misplaced, typed_command};
pub use serve::{ServeArgs, ServeSettings};

/// The Signals API, its storage and the bridge relay.
#[derive(Debug, Parser)]
#[command(name = "cloud", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "CLOUD_LOG_FORMAT",
        value_enum,
        default_value = "json"
    )]
    pub log_format: LogFormat,
    /// Log level: trace, debug, info, warn, error or off (or a tracing filter directive).
    /// Default: info for `serve` and `db-proxy` (logs on stdout); warn for admin commands, which are quiet unless something goes wrong (with
    /// info, their audit entries are JSON lines on stderr too).
    #[arg(long, global = true, env = "CLOUD_LOG_LEVEL", value_parser = crate::logging::parse_level)]
    pub log_level: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data lives; shared by `serve` and the admin commands. `Debug` hides the
/// database URL's password.
#[derive(Clone, Args)]
pub struct StorageArgs {
    /// Directory for the SQLite database and the internal CA (`ca.pem`, `ca-key.pem`), which
    /// signs the server certificate each start issues.
    #[arg(long, env = "CLOUD_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// PostgreSQL URL (postgres://user@host:port/db); SQLite in --data-dir when absent. A
    /// password in it shows in `ps` when given as a flag: set CLOUD_DATABASE_URL instead.
    #[arg(long, env = "CLOUD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl std::fmt::Debug for StorageArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageArgs")
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_deref().map(crate::storage::redact_url),
            )
            .finish()
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service.
    #[command(after_help = serve::SERVE_AFTER_HELP)]
    Serve(ServeArgs),
    /// Manage organisations.
    #[command(subcommand)]
    Org(OrgCommand),
    /// Manage signal keys (the address events are posted to; not a secret).
    #[command(subcommand, name = "signal-key")]
    SignalKey(KeyCommand),
    /// Manage API keys (each shown once when created, then stored hashed).
    #[command(subcommand, name = "api-key")]
    ApiKey(KeyCommand),
    /// Manage bridge tokens (each shown once when created, then stored hashed).
    #[command(subcommand, name = "bridge-token")]
    BridgeToken(BridgeTokenCommand),
    /// Manage dashboard users (each gets a one-time set-password link).
    #[command(subcommand)]
    User(UserCommand),
    /// Set or remove an org's webhook (as an admin does on the dashboard's Notifications page).
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Serve one database behind a bridge on a loopback port, reached over HTTPS: local
    /// PostgreSQL clients connect without TLS or password. The API key comes from the
    /// environment (CLOUD_API_KEY), never a flag.
    #[command(name = "db-proxy")]
    DbProxy(DbProxyArgs),
}

/// Options of `cloud db-proxy`.
#[derive(Debug, Args)]
pub struct DbProxyArgs {
    /// The cloud's address, such as https://signals.example.com.
    #[arg(long, env = "CLOUD_API_URL", value_parser = api_url)]
    pub api_url: url::Url,
    /// The CA (PEM) that signs the cloud's certificate, such as its data/ca.pem; default: the
    /// system roots.
    #[arg(long, env = "CLOUD_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// The bridge's name.
    #[arg(long, env = "CLOUD_DB_PROXY_BRIDGE")]
    pub bridge: String,
    /// The name of the bridge's `databases` entry.
    #[arg(long, env = "CLOUD_DB_PROXY_DATABASE")]
    pub database: String,
    /// Where local clients connect (a loopback address).
    #[arg(long, env = "CLOUD_DB_PROXY_LISTEN", default_value = "127.0.0.1:5432", value_parser = listen_address)]
    pub listen: SocketAddr,
}

fn api_url(raw: &str) -> Result<url::Url, String> {
    match url::Url::parse(raw.trim()) {
        Ok(u) if matches!(u.scheme(), "https" | "http") && u.host().is_some() => Ok(u),
        _ => Err(format!(
            "{raw:?} is not the cloud's address: expected such as https://signals.example.com"
        )),
    }
}

impl Cli {
    /// The command line, or clap's error and exit (2 for a usage error). A value refused that
    /// came from a `CLOUD_*` variable rather than the command line is said to have come from
    /// it: clap names only the option, which the operator may never have typed.
    pub fn parse_or_exit() -> Cli {
        let err = match parse_typed_first() {
            Ok(cli) => return cli,
            Err(err) => err,
        };
        let invalid = match err.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(arg)) => Some(arg.clone()),
            _ => None,
        };
        let _ = err.print();
        if let Some(var) = invalid.as_deref().and_then(env_behind) {
            eprintln!("(the value comes from the environment variable {var})");
        }
        let untipped = err.get(clap::error::ContextKind::SuggestedArg).is_none()
            && err.get(clap::error::ContextKind::Suggested).is_none();
        if err.kind() == clap::error::ErrorKind::UnknownArgument
            && untipped
            && let Some(hint) = invalid.as_deref().and_then(misplaced)
        {
            eprintln!("{hint}");
        }
        std::process::exit(err.exit_code());
    }
}

/// The command line parsed. An admin command with `--data-dir` typed and `CLOUD_DATABASE_URL`
/// from the environment is a usage error: the two name different stores, and the command
/// would change the one the operator did not type. Typed together, the URL wins, as
/// documented; `serve` takes both (its data directory keeps the Git mirrors on PostgreSQL).
fn parse_typed_first() -> Result<Cli, clap::Error> {
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command().try_get_matches();
    // Help asked for is given, whatever the environment holds.
    let asks_help = parsed.as_ref().is_err_and(|e| {
        use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
        matches!(e.kind(), DisplayHelp | DisplayVersion)
    });
    if !asks_help && let Some(why) = blank_env() {
        return Err(typed_command().error(clap::error::ErrorKind::InvalidValue, why));
    }
    let matches = parsed?;
    let mut path = Vec::new();
    let mut leaf = &matches;
    while let Some((name, sub)) = leaf.subcommand() {
        path.push(name);
        leaf = sub;
    }
    let admin = path.first().is_some_and(|first| *first != "serve");
    let has_storage = leaf.try_contains_id("data_dir").unwrap_or(false);
    if admin
        && has_storage
        && leaf.value_source("data_dir") == Some(ValueSource::CommandLine)
        && leaf.value_source("database_url") == Some(ValueSource::EnvVariable)
    {
        return Err(typed_command().error(
            clap::error::ErrorKind::ArgumentConflict,
            "--data-dir is typed and CLOUD_DATABASE_URL is set in the environment: they name two different stores. For SQLite in that directory, unset CLOUD_DATABASE_URL; for PostgreSQL, drop --data-dir (or pass --database-url)",
        ));
    }
    Cli::from_arg_matches(&matches)
}

/// An address to listen on: an IP address and a port, as the socket takes it.
fn listen_address(raw: &str) -> Result<SocketAddr, String> {
    raw.trim().parse().map_err(|_| {
        format!(
            "{raw:?} is not an address and port, such as 127.0.0.1:8443 or [::1]:5432 (a host name such as localhost is not looked up: give its address)"
        )
    })
}

/// A switch's value, as its environment variable gives it; a refusal lists the words taken.
pub(crate) fn switch(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "1" | "yes" | "y" | "on" => Ok(true),
        "false" | "f" | "0" | "no" | "n" | "off" => Ok(false),
        _ => Err("expected true or false (or 1/0, yes/no, on/off)".into()),
    }
}
