//! `databases`: PostgreSQL servers, the login the bridge uses and its TLS mode.

use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{
    DEFAULT_POSTGRES_PORT, Database, DatabaseEngine, ResourceKind, SslMode,
};

use super::max_connections;
use crate::config::validate::fields::{Ctx, Names, located};

/// The `databases` entries that are valid; every fault is reported to `cx`.
pub(super) fn databases(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Database> {
    let mut names = Names::new(ResourceKind::Database);
    let mut entries = Vec::new();
    for (i, spanned) in file.databases.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("databases[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let kinds = ["postgresql", "postgres"];
        cx.kind(entry.kind.as_ref(), &format!("{key}.type"), &kinds);
        let host = cx
            .required(entry.host.as_ref(), &format!("{key}.host"), &at)
            .filter(|host| match host_problem(host.value.trim()) {
                None => true,
                Some(problem) => {
                    cx.fail(&format!("{key}.host"), &host.origin, problem);
                    false
                }
            });
        let port = cx
            .int(
                entry.port.as_ref().map(located),
                &format!("{key}.port"),
                1..=65535,
                "a port from 1 to 65535",
            )
            .map_or(DEFAULT_POSTGRES_PORT, |p| p as u16);
        let database = cx.required(entry.database.as_ref(), &format!("{key}.database"), &at);
        let credentials_key = format!("{key}.credentials");
        let credentials = match &entry.credentials {
            Some(creds) => cx.credentials(
                creds.value.username.as_ref(),
                creds.value.password.as_ref(),
                &Origin::at(&creds.referenced),
                &credentials_key,
                true,
            ),
            None => {
                cx.fail(&credentials_key, &at, "required (username, password)");
                None
            }
        };
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let sslmode = match &entry.sslmode {
            None => Some(SslMode::Prefer),
            Some(given) => {
                let mode = SslMode::parse(given.value.trim());
                if mode.is_none() {
                    cx.fail(
                        &format!("{key}.sslmode"),
                        &Origin::at(&given.referenced),
                        format!(
                            "{:?} is not an sslmode; use one of {}",
                            given.value,
                            SslMode::NAMES.join(", ")
                        ),
                    );
                }
                mode
            }
        };
        let sslrootcert = cx.path(entry.sslrootcert.as_ref(), &format!("{key}.sslrootcert"));
        let (Some(host), Some(database), Some(credentials), Some(sslmode)) =
            (host, database, credentials, sslmode)
        else {
            continue;
        };
        let base = database.value.clone();
        let db = Database {
            name: String::new(),
            engine: DatabaseEngine::Postgresql,
            host: host.value.trim().to_owned(),
            port,
            database: database.value,
            credentials,
            max_connections,
            sslmode,
            sslrootcert,
            read_only: entry.read_only.unwrap_or(false),
            audit_statements: entry.audit_statements.unwrap_or(false),
        };
        entries.push((explicit, base, db));
    }
    names.finish(entries, |db, name| db.name = name)
}

/// What is wrong with a `host` that is more than a host name or address: a URL, or a port
/// (which goes in `port`).
fn host_problem(host: &str) -> Option<String> {
    if host.contains("://") {
        return Some(format!(
            "{host:?} is a URL; give the host name or address alone, and the port in `port`"
        ));
    }
    // An IPv6 address has colons of its own; a port would follow `]`.
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let ipv6 = host.parse::<std::net::Ipv6Addr>().is_ok() || bracketed;
    if (!ipv6 && host.contains(':')) || host.contains("]:") || host.contains('/') {
        return Some(format!(
            "{host:?} is not a host name or address alone; put the port in `port` (default 5432)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_host_is_a_name_or_an_address_alone() {
        assert_eq!(super::host_problem("db.internal"), None);
        assert_eq!(super::host_problem("127.0.0.1"), None);
        assert_eq!(super::host_problem("::1"), None);
        assert!(
            super::host_problem("postgres://127.0.0.1:5432")
                .unwrap()
                .contains("is a URL")
        );
        assert!(
            super::host_problem("127.0.0.1:5432")
                .unwrap()
                .contains("`port`")
        );
        assert!(
            super::host_problem("[::1]:5432")
                .unwrap()
                .contains("`port`")
        );
    }
}
