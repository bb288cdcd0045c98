//! The bridge's typed configuration (docs/bridge.md, "Configuration").
//!
//! Loading goes: YAML file (`file.rs`: strict, every value located) → `${NAME}` expansion
//! (`expand.rs`) and environment overrides (through [`Env`]) → validation (`validate.rs`), which
//! checks everything at once and yields a [`Config`] or a [`ConfigError`] listing every
//! problem with its key path and line. A [`Config`] is therefore valid by construction; secrets
//! in it are [`Secret`]s and proxy credentials are masked, so `{:?}` of it is safe to log.
//!
//! Decisions of note: `${NAME}` works in string values only (not in numbers); resource
//! names are unique per kind; relative paths are relative to the working directory; an empty
//! environment variable counts as unset for overrides.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use url::Url;

use self::parse::parse_file;

mod env;
mod error;
mod expand;
mod file;
mod flow;
mod key_path;
mod parse;
mod proxy;
mod resources;
mod secret;
#[cfg(test)]
mod tests;
mod validate;

pub use env::{
    API_URL_VAR, Env, HEARTBEAT_INTERVAL_VAR, HTTPS_PROXY_VARS, LOG_LEVEL_VAR, MapEnv, NAME_VAR,
    NO_PROXY_VARS, ProcessEnv, TLS_CA_FILE_VAR, TOKEN_VAR,
};
pub use error::{ConfigError, Origin, Problem};
pub use proxy::{ProxyUrl, bypasses_proxy, parse_no_proxy};
pub use resources::{
    AllowRule, Api, ApiAuth, Credentials, DEFAULT_POSTGRES_PORT, Database, DatabaseEngine,
    GIT_TOKEN_USER, GitAuth, GitSource, MAX_NAME_LEN, Registry, ResourceKind, SslMode,
    is_valid_name,
};
pub use secret::{Secret, basic_authorization};

/// The shortest injected secret (and form of it), in bytes, the bridge looks for in an entry's answers
/// before handing them back: shorter ones would match unrelated text by chance, so a start
/// warning names each secret below it.
pub const SHORTEST_SECRET: usize = 8;

/// Default `api_url`: the `cloud` binary's default TLS address.
pub const DEFAULT_API_URL: &str = "https://127.0.0.1:8443";
/// Default `heartbeat_interval`, seconds.
pub const DEFAULT_HEARTBEAT_INTERVAL_SECS: u64 = 30;
/// Default `reconnect_delay` (first back-off step), seconds.
pub const DEFAULT_RECONNECT_DELAY_SECS: u64 = 5;
/// Default `max_connections`: concurrent forwarded streams per instance.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default `max_memory_mb`.
pub const DEFAULT_MAX_MEMORY_MB: u64 = 512;
/// Default `tls_verify`.
pub const DEFAULT_TLS_VERIFY: bool = true;
/// Default `health_check_address`: every interface (IPv4).
pub const DEFAULT_HEALTH_CHECK_ADDRESS: std::net::IpAddr =
    std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
/// Default `health_check_port` (serves `/livez`, `/health` and `/metrics`).
pub const DEFAULT_HEALTH_CHECK_PORT: u16 = 8080;
/// Largest `heartbeat_interval` and `reconnect_delay` accepted, seconds (catches milliseconds
/// written by mistake).
pub const MAX_INTERVAL_SECS: u64 = 3600;
/// Largest `max_connections` accepted, bridge-wide or per resource.
pub const MAX_MAX_CONNECTIONS: u32 = 10_000;
/// The `audit_log` value that means standard output.
pub const AUDIT_LOG_STDOUT: &str = "stdout";

/// The validated configuration of one bridge instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bridge token (`token` / `SERVICE_BRIDGE_TOKEN`).
    pub token: Secret,
    /// Bridge name (`name` / `SERVICE_BRIDGE_NAME`), a valid [`is_valid_name`].
    pub name: String,
    /// The cloud's address (`api_url` / `SERVICE_API_URL`), always `https`.
    pub api_url: Url,
    /// Application heartbeat period (`heartbeat_interval` / `SERVICE_HEARTBEAT_INTERVAL`).
    pub heartbeat_interval: Duration,
    /// First reconnect back-off step (`reconnect_delay`).
    pub reconnect_delay: Duration,
    /// Log verbosity (`log_level` / `SERVICE_LOG_LEVEL`).
    pub log_level: LogLevel,
    /// Log line format (`log_format`).
    pub log_format: LogFormat,
    /// Concurrent forwarded streams (`max_connections`).
    pub max_connections: u32,
    /// Memory ceiling in MiB above which new streams are refused (`max_memory_mb`).
    pub max_memory_mb: u64,
    /// Outbound proxy: `proxy_url`, else `https_proxy` / `HTTPS_PROXY`.
    pub proxy_url: Option<ProxyUrl>,
    /// Hosts that bypass the proxy, from `no_proxy` / `NO_PROXY` (see [`bypasses_proxy`]).
    pub no_proxy: Vec<String>,
    /// Verify the cloud's certificate (`tls_verify`); `false` is for development only.
    pub tls_verify: bool,
    /// CA bundle for the cloud's certificate instead of the system roots (`tls_ca_file`).
    pub tls_ca_file: Option<PathBuf>,
    /// Where `tls_ca_file` came from, for its errors: the key, or the variable that set it.
    pub tls_ca_file_origin: &'static str,
    /// Client certificate from the operator's PKI instead of enrollment (`tls_cert_file`);
    /// set exactly when `tls_key_file` is.
    pub tls_cert_file: Option<PathBuf>,
    /// Key of `tls_cert_file` (`tls_key_file`).
    pub tls_key_file: Option<PathBuf>,
    /// Where enrollment keeps its key and certificate (`state_dir`); `None` lets the caller
    /// choose.
    pub state_dir: Option<PathBuf>,
    /// Where audit records go (`audit_log`).
    pub audit_log: AuditTarget,
    /// Port of the local health and metrics server (`health_check_port`); 0 picks a free
    /// one, logged at start.
    pub health_check_port: u16,
    /// Address it listens on (`health_check_address`): every interface by default, which a
    /// container's port mapping and an orchestrator's probes need.
    pub health_check_address: std::net::IpAddr,
    /// Git servers (`sources`).
    pub sources: Vec<GitSource>,
    /// Databases (`databases`).
    pub databases: Vec<Database>,
    /// HTTP APIs (`apis`).
    pub apis: Vec<Api>,
    /// OCI registries (`registries`).
    pub registries: Vec<Registry>,
}

impl Config {
    /// Reads and validates the YAML file at `path`, with `env` for overrides and `${NAME}`.
    pub fn load(path: &Path, env: &dyn Env) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string(), env)
    }

    /// Validates YAML `text`; `source` names it in error messages (usually the file path).
    pub fn from_yaml(text: &str, source: &str, env: &dyn Env) -> Result<Self, ConfigError> {
        let invalid = |problems| ConfigError::Invalid {
            file: source.to_owned(),
            problems,
        };
        let (file, unknown) = parse_file(text).map_err(invalid)?;
        match validate::validate(&file, env) {
            Ok(config) if unknown.is_empty() => Ok(config),
            Ok(_) => Err(invalid(unknown)),
            Err(mut problems) => {
                // A value of the wrong type was blanked (or emptied, where text belongs) for the
                // reading to go on: what validation then says of that key ("required") is
                // already said. An unknown key hides nothing: the entry's own problems stand.
                let blanked: Vec<&Problem> = unknown
                    .iter()
                    .filter(|u| !u.message.starts_with("unknown field"))
                    .collect();
                problems.retain(|p| {
                    !blanked.iter().any(|u| match u.key.is_empty() {
                        false => u.key == p.key,
                        true => {
                            u.message == key_path::TEXT
                                && matches!(u.origin, Origin::File { .. })
                                && u.origin == p.origin
                        }
                    })
                });
                problems.extend(unknown);
                error::in_file_order(&mut problems);
                Err(invalid(problems))
            }
        }
    }

    /// Where the health endpoint of the bridge run with the file at `path` (or the environment
    /// alone) listens: the file is read and checked as [`Config::load`] does (syntax, unknown
    /// keys), but only `health_check_address` and `health_check_port` are validated, so that
    /// `bridge healthcheck` needs neither the token nor the resources' secrets.
    pub fn health_endpoint(
        path: Option<&Path>,
        env: &dyn Env,
    ) -> Result<(std::net::IpAddr, u16), ConfigError> {
        let (file, source, mut problems) = match path {
            None => (
                file::FileConfig::default(),
                "environment".to_owned(),
                Vec::new(),
            ),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let source = path.display().to_string();
                match parse_file(&text) {
                    Ok((file, unknown)) => (file, source, unknown),
                    Err(problems) => {
                        return Err(ConfigError::Invalid {
                            file: source,
                            problems,
                        });
                    }
                }
            }
        };
        let endpoint = validate::health_endpoint(&file, env).map_err(|p| problems.extend(p));
        match endpoint {
            Ok(endpoint) if problems.is_empty() => Ok(endpoint),
            _ => {
                error::in_file_order(&mut problems);
                Err(ConfigError::Invalid {
                    file: source,
                    problems,
                })
            }
        }
    }

    /// Builds the configuration from the environment alone (no file), as a container would.
    /// A failure says first that no file was given: a newcomer who forgot `--config` would
    /// otherwise read only that the token and the name are missing.
    pub fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        validate::validate(&file::FileConfig::default(), env).map_err(|mut problems| {
            problems.insert(
                0,
                Problem::new(
                    "",
                    Origin::Unknown,
                    format!(
                        "no configuration file was given (--config FILE, or SERVICE_BRIDGE_CONFIG), so every setting comes from the environment ({TOKEN_VAR}, {NAME_VAR}, ...)"
                    ),
                ),
            );
            ConfigError::Invalid {
                file: "environment".to_owned(),
                problems,
            }
        })
    }

    /// The proxy to use for `host:port`, or `None` to connect directly.
    pub fn proxy_for(&self, host: &str, port: u16) -> Option<&ProxyUrl> {
        self.proxy_url
            .as_ref()
            .filter(|_| !bypasses_proxy(&self.no_proxy, host, port))
    }

    /// Every declared resource as (kind, name), in file order per kind: what the bridge
    /// announces in its handshake (never the credentials).
    pub fn resources(&self) -> Vec<(ResourceKind, &str)> {
        let sources = self.sources.iter().map(|r| (ResourceKind::Git, &*r.name));
        let databases = self
            .databases
            .iter()
            .map(|r| (ResourceKind::Database, &*r.name));
        let apis = self.apis.iter().map(|r| (ResourceKind::Api, &*r.name));
        let registries = self
            .registries
            .iter()
            .map(|r| (ResourceKind::Registry, &*r.name));
        sources
            .chain(databases)
            .chain(apis)
            .chain(registries)
            .collect()
    }

    /// What works, but not as the config's author likely meant: said at start and by `bridge
    /// check`, not refused.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = self.limits_above_the_bridge();
        warnings.extend(self.unused_root_certificates());
        warnings.extend(self.short_secrets());
        warnings
    }

    /// `apis` and `sources` entries whose injected secret (a token, a password, a header's value) is shorter
    /// than the bridge looks for in answers (`forward::echo`, 8 characters: shorter would match
    /// unrelated text): an internal system that writes that secret back alone reaches the
    /// caller with it, and a secret so short is easy to guess.
    fn short_secrets(&self) -> Vec<String> {
        let apis = (self.apis.iter().enumerate()).filter_map(|(i, r)| {
            let (field, secret) = match r.auth.as_ref()? {
                ApiAuth::Basic(c) => ("password", &c.password),
                ApiAuth::Bearer(token) => ("token", token),
                ApiAuth::Header { value, .. } => ("value", value),
            };
            Some((format!("apis[{i}].auth.{field}"), &r.name, secret.expose()))
        });
        let sources = (self.sources.iter().enumerate()).filter_map(|(i, r)| {
            let (field, secret) = match r.auth.as_ref()? {
                GitAuth::Token { token, .. } | GitAuth::Bearer(token) => ("token", token),
                GitAuth::Basic(c) => ("password", &c.password),
            };
            Some((
                format!("sources[{i}].auth.{field}"),
                &r.name,
                secret.expose(),
            ))
        });
        let registries = (self.registries.iter().enumerate()).filter_map(|(i, r)| {
            let login = r.auth.as_ref()?;
            Some((
                format!("registries[{i}].auth.password"),
                &r.name,
                login.password.expose(),
            ))
        });
        apis.chain(sources)
            .chain(registries)
            .filter(|(_, _, secret)| {
                // As the echo check reads a value: what follows its first word (`Token abc`)
                // is looked for alone too.
                let token = secret.trim().split_once(' ').map_or(secret.trim(), |(_, t)| t);
                (1..SHORTEST_SECRET).contains(&token.trim().len())
            })
            .map(|(key, name, _)| {
                format!(
                    "{key} ({name}) is shorter than {SHORTEST_SECRET} characters (bytes, in UTF-8), or its part after a space is: the bridge does not look for so short a secret in the entry's answers (it would match unrelated text), so an answer that repeats it reaches the caller, and it is easy to guess; use a longer one"
                )
            })
            .collect()
    }

    /// Databases whose `sslrootcert` is set under an `sslmode` that checks no certificate
    /// (`prefer`, the default, `require`, `disable`): the file is not used, and the entry may
    /// look verified when it is not.
    fn unused_root_certificates(&self) -> Vec<String> {
        (self.databases.iter().enumerate())
            .filter(|(_, d)| {
                d.sslrootcert.is_some()
                    && !matches!(d.sslmode, SslMode::VerifyCa | SslMode::VerifyFull)
            })
            .map(|(i, d)| {
                format!(
                    "databases[{i}].sslrootcert is set ({}), but its sslmode is {}, which checks no certificate: the file is not used. Set sslmode: verify-full (or verify-ca) to check the server with it",
                    d.name,
                    d.sslmode.name()
                )
            })
            .collect()
    }

    /// Entries whose own `max_connections` is above the bridge's, which they can never reach
    /// (the bridge's is shared by every entry); not refused, since raising the bridge's later
    /// makes it count.
    fn limits_above_the_bridge(&self) -> Vec<String> {
        let entries = (self.apis.iter().enumerate())
            .map(|(i, r)| (format!("apis[{i}]"), &r.name, r.max_connections))
            .chain(
                (self.sources.iter().enumerate())
                    .map(|(i, r)| (format!("sources[{i}]"), &r.name, r.max_connections)),
            )
            .chain(
                (self.registries.iter().enumerate())
                    .map(|(i, r)| (format!("registries[{i}]"), &r.name, r.max_connections)),
            )
            .chain(
                (self.databases.iter().enumerate())
                    .map(|(i, r)| (format!("databases[{i}]"), &r.name, r.max_connections)),
            );
        entries
            .filter_map(|(key, name, limit)| {
                let limit = limit.filter(|l| *l > self.max_connections)?;
                Some(format!(
                    "{key}.max_connections {limit} ({name}) is above the bridge's max_connections {}, which every entry shares: the entry never gets more than {} at once; lower it, or raise the bridge's",
                    self.max_connections, self.max_connections
                ))
            })
            .collect()
    }
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info` (default)
    #[default]
    Info,
    /// `warn` (`warning` is accepted too)
    Warn,
    /// `error`
    Error,
}

impl LogLevel {
    /// The lowercase name, as `tracing`'s filters spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "debug" => Ok(Self::Debug),
            "info" => Ok(Self::Info),
            "warn" | "warning" => Ok(Self::Warn),
            "error" => Ok(Self::Error),
            _ => Err(format!(
                "expected one of debug, info, warn, error, got {s:?}"
            )),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One JSON object per line (default).
    #[default]
    Json,
    /// Human-readable text.
    Text,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "text" => Ok(Self::Text),
            _ => Err(format!("expected json or text, got {s:?}")),
        }
    }
}

/// Where audit records are written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AuditTarget {
    /// Standard output, among the ordinary log lines (default).
    #[default]
    Stdout,
    /// Appended to this file.
    File(PathBuf),
}
