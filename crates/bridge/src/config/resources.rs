//! The internal resources a bridge may forward to (`sources`, `databases`, `apis`,
//! `registries`), after validation, and the rules for their names.

use std::collections::HashSet;

use url::Url;

use super::Secret;

/// PostgreSQL's default port, used when a database entry gives none.
pub const DEFAULT_POSTGRES_PORT: u16 = 5432;
/// The longest name a bridge or a resource may have.
pub use tunnel::MAX_RESOURCE_NAME_LEN as MAX_NAME_LEN;
/// A resource's name: the cloud checks it by the same rule (`tunnel`).
pub use tunnel::is_valid_resource_name as is_valid_name;

pub use crate::rules::AllowRule;
pub use tunnel::ResourceKind;

/// A user name and password (database login, API basic auth, registry login).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password (may be empty where the entry allows it).
    pub password: Secret,
}

/// The user name paired with a Git token when the entry names none: GitHub Enterprise,
/// GitLab, Gitea and Bitbucket Server all accept any user with a token as the password, and
/// this is the name GitHub documents.
pub const GIT_TOKEN_USER: &str = "x-access-token";

/// `sources[].auth`: how the bridge proves itself to the Git server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAuth {
    /// `type: token` (the default): HTTP Basic with the token as the password and
    /// `username`, or [`GIT_TOKEN_USER`], as the user.
    Token {
        /// The user name to pair with the token.
        username: Option<String>,
        /// The access token.
        token: Secret,
    },
    /// `type: bearer`: `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `type: basic`: a user name and password.
    Basic(Credentials),
}

impl GitAuth {
    /// The `Authorization` header value the bridge adds to each request to the server.
    pub fn authorization(&self) -> String {
        match self {
            GitAuth::Token { username, token } => {
                let user = username.as_deref().unwrap_or(GIT_TOKEN_USER);
                super::basic_authorization(user, token)
            }
            GitAuth::Bearer(token) => format!("Bearer {}", token.expose()),
            GitAuth::Basic(c) => super::basic_authorization(&c.username, &c.password),
        }
    }
}

/// A Git server reached over smart HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    /// Unique among sources; defaults to the URL's host.
    pub name: String,
    /// Base URL (`http` or `https`, no credentials in it).
    pub url: Url,
    /// Credentials added to each forwarded request; `None` for an anonymous server.
    pub auth: Option<GitAuth>,
    /// Globs of the repository paths reachable under `url` (`*` matches any run of
    /// characters, `/` included; a glob matches a path with or without its `.git` suffix).
    /// Empty: every repository of the server.
    pub repositories: Vec<String>,
    /// Whether `git push` (receive-pack) is allowed; fetch only by default.
    pub allow_push: bool,
    /// Allow rules that narrow what passes (pulls, and pushes with `allow_push`); empty means
    /// no narrowing.
    pub allow: Vec<AllowRule>,
    /// Concurrent streams to this source; `None` means only the bridge-wide limit applies.
    pub max_connections: Option<u32>,
    /// The CA bundle that signs this server's certificate, trusted for it instead of the
    /// system roots (`tls_ca_file`).
    pub tls_ca_file: Option<std::path::PathBuf>,
}

impl GitSource {
    /// The first of `repositories` named without a glob: the one `bridge check` fetches and
    /// messages give as an example.
    pub fn first_named_repository(&self) -> Option<&str> {
        self.repositories
            .iter()
            .find(|r| !r.contains('*'))
            .map(String::as_str)
    }
}

/// The database engine of a `databases` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseEngine {
    /// PostgreSQL (`type: postgresql` or `postgres`).
    Postgresql,
}

/// How the bridge secures its connection to a database (`sslmode`, as libpq names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP; the server is never asked for TLS.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked
    /// (libpq's default).
    Prefer,
    /// TLS or nothing; the certificate is not checked.
    Require,
    /// TLS with a certificate chained to `sslrootcert` (or the system roots), any host name.
    VerifyCa,
    /// TLS with a certificate chained to `sslrootcert` (or the system roots) and naming `host`.
    VerifyFull,
}

impl SslMode {
    /// Every accepted value, in the order the docs list them.
    pub const NAMES: [&str; 5] = ["disable", "prefer", "require", "verify-ca", "verify-full"];

    const ALL: [SslMode; 5] = [
        SslMode::Disable,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Self::ALL[i])
    }

    /// The mode's name as written in the configuration.
    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|m| *m == self).unwrap_or(0)]
    }
}

/// A database the bridge logs in to on the cloud's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    /// Unique among databases; defaults to `database`.
    pub name: String,
    /// The engine.
    pub engine: DatabaseEngine,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Database name on the server.
    pub database: String,
    /// Login; the password may be empty (trust authentication).
    pub credentials: Credentials,
    /// Concurrent connections to this database; `None` means only the bridge-wide limit.
    pub max_connections: Option<u32>,
    /// TLS to the database (`sslmode`, default `prefer`).
    pub sslmode: SslMode,
    /// The CA bundle for `verify-ca` and `verify-full` instead of the system roots.
    pub sslrootcert: Option<std::path::PathBuf>,
    /// Every session starts with `default_transaction_read_only=on`.
    pub read_only: bool,
    /// One audit record per statement text (simple queries and `Parse`).
    pub audit_statements: bool,
}

/// `apis[].auth`: how the bridge proves itself to an internal API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiAuth {
    /// `type: basic` (the default): HTTP Basic with `username` and `password`.
    Basic(Credentials),
    /// `type: bearer`: `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `type: header`: one header of the API's own, such as `X-API-Key: <value>`.
    Header {
        /// The header's name, lowercase.
        name: http::HeaderName,
        /// Its value (a secret).
        value: Secret,
    },
}

impl ApiAuth {
    /// The header the bridge adds to each request to the API.
    pub fn header(&self) -> (http::HeaderName, String) {
        match self {
            ApiAuth::Basic(c) => (
                http::header::AUTHORIZATION,
                super::basic_authorization(&c.username, &c.password),
            ),
            ApiAuth::Bearer(token) => (
                http::header::AUTHORIZATION,
                format!("Bearer {}", token.expose()),
            ),
            ApiAuth::Header { name, value } => (name.clone(), value.expose().to_string()),
        }
    }
}

/// An internal HTTP API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    /// Unique among APIs; defaults to the URL's host.
    pub name: String,
    /// Base URL (`http` or `https`, no credentials in it).
    pub url: Url,
    /// Credentials added to each forwarded request.
    pub auth: Option<ApiAuth>,
    /// Allow rules; empty means every method and path.
    pub allow: Vec<AllowRule>,
    /// Concurrent streams to this API; `None` means only the bridge-wide limit applies.
    pub max_connections: Option<u32>,
    /// The CA bundle that signs this API's certificate, trusted for it instead of the system
    /// roots (`tls_ca_file`): an internal system's private CA stays trusted for that system only.
    pub tls_ca_file: Option<std::path::PathBuf>,
}

/// A private OCI registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// Unique among registries; defaults to the URL's host.
    pub name: String,
    /// Base URL (`https://` assumed when the file gives a bare `host:port`).
    pub url: Url,
    /// Login used to answer the registry's Basic or Bearer-token challenge.
    pub auth: Option<Credentials>,
    /// Hosts (`host` or `host:port`) besides the registry's own where a Bearer challenge's
    /// `realm` may send the bridge with the login (`token_hosts`): a challenge naming any other
    /// host is refused, so no registry answer can make the bridge hand its login elsewhere.
    pub token_hosts: Vec<String>,
    /// Hosts (`host` or `host:port`) besides the registry's own that the bridge follows its
    /// redirects to (`redirect_hosts`: S3-like blob storage); never a host not named here.
    pub redirect_hosts: Vec<String>,
    /// Whether pushes (`POST`, `PUT`, `PATCH` under `/v2/`) pass; pulls only by default.
    pub allow_push: bool,
    /// Extra allow rules; empty means the read-only defaults.
    pub allow: Vec<AllowRule>,
    /// Concurrent streams to this registry; `None` means only the bridge-wide limit applies.
    pub max_connections: Option<u32>,
    /// The CA bundle trusted for this registry's HTTPS (its token service and redirect hosts
    /// too) instead of the system roots (`tls_ca_file`).
    pub tls_ca_file: Option<std::path::PathBuf>,
}

/// What the error messages say a valid name is.
pub(crate) use tunnel::RESOURCE_NAME_RULE as NAME_RULE;

/// Turns `raw` (a host, a database name) into a valid name: invalid characters become `-`,
/// the result is cut to [`MAX_NAME_LEN`], and `fallback` is used when nothing is left.
pub(crate) fn derive_name(raw: &str, fallback: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(MAX_NAME_LEN);
    let name = name.trim_matches('-');
    if is_valid_name(name) {
        name.to_owned()
    } else {
        fallback.to_owned()
    }
}

/// Makes `base` unique within `taken` by appending `-2`, `-3`, ... and records it.
pub(crate) fn claim_unique(base: &str, taken: &mut HashSet<String>) -> String {
    if taken.insert(base.to_owned()) {
        return base.to_owned();
    }
    for n in 2.. {
        let suffix = format!("-{n}");
        let mut stem = base.to_owned();
        stem.truncate(MAX_NAME_LEN - suffix.len());
        let candidate = format!("{stem}{suffix}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
    }
    unreachable!("the counter is unbounded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_name("git.internal-1_a"));
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(64)] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
        assert_eq!(derive_name("git.corp:8443", "source"), "git.corp-8443");
        assert_eq!(derive_name("..", "source"), "source");
        assert_eq!(derive_name(&"h".repeat(80), "x").len(), MAX_NAME_LEN);
    }

    #[test]
    fn unique_names_get_suffixes() {
        let mut taken = HashSet::new();
        assert_eq!(claim_unique("git", &mut taken), "git");
        assert_eq!(claim_unique("git", &mut taken), "git-2");
        assert_eq!(claim_unique("git", &mut taken), "git-3");
        let long = "y".repeat(MAX_NAME_LEN);
        assert_eq!(claim_unique(&long, &mut taken), long);
        let second = claim_unique(&long, &mut taken);
        assert!(second.ends_with("-2") && second.len() == MAX_NAME_LEN);
    }
}
