//! Validation of the resource lists: `sources`, `databases`, `apis`, `registries`.

use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{
    Api, ApiAuth, DEFAULT_POSTGRES_PORT, Database, DatabaseEngine, GitAuth, GitSource, Registry,
    ResourceKind, SslMode,
};
use crate::config::{MAX_MAX_CONNECTIONS, Secret};

use super::fields::{Ctx, Names, located};

/// Every resource list, validated and named.
pub(super) fn all(
    cx: &mut Ctx<'_>,
    file: &FileConfig,
) -> (Vec<GitSource>, Vec<Database>, Vec<Api>, Vec<Registry>) {
    (
        sources(cx, file),
        databases(cx, file),
        apis(cx, file),
        registries(cx, file),
    )
}

/// An optional sub-entry: `None` when given but invalid, `Some(None)` when absent.
fn present_and_valid<T>(value: Option<Option<T>>) -> Option<Option<T>> {
    value.map_or(Some(None), |inner| inner.map(Some))
}

/// A resource's own `max_connections`.
fn max_connections(
    cx: &mut Ctx<'_>,
    value: Option<&serde_saphyr::Spanned<i64>>,
    key: &str,
) -> Option<u32> {
    let expected = format!("a whole number from 1 to {MAX_MAX_CONNECTIONS}");
    let key = format!("{key}.max_connections");
    let range = 1..=i64::from(MAX_MAX_CONNECTIONS);
    cx.int(value.map(located), &key, range, &expected)
        .map(|n| n as u32)
}

fn sources(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<GitSource> {
    let mut names = Names::new(ResourceKind::Git);
    let mut entries = Vec::new();
    for (i, spanned) in file.sources.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("sources[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        cx.kind(entry.kind.as_ref(), &format!("{key}.type"), &["git"]);
        let url = cx
            .required(entry.url.as_ref(), &format!("{key}.url"), &at)
            .and_then(|given| cx.url(&given, &format!("{key}.url"), &["http", "https"], None));
        let auth = entry
            .auth
            .as_ref()
            .map(|auth| git_auth(cx, &auth.value, &Origin::at(&auth.referenced), &key));
        let repositories = repositories(cx, entry.repositories.as_ref(), &key);
        let allow = cx.allow_rules(entry.allow.as_ref(), &key);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let (Some(url), Some(auth), Some(repositories)) =
            (url, present_and_valid(auth), repositories)
        else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let source = GitSource {
            name: String::new(),
            url,
            auth,
            repositories,
            allow_push: entry.allow_push.unwrap_or(false),
            allow,
            max_connections,
            tls_ca_file: cx.path(entry.tls_ca_file.as_ref(), &format!("{key}.tls_ca_file")),
        };
        entries.push((explicit, base, source));
    }
    names.finish(entries, |source, name| source.name = name)
}

/// `sources[].auth`: `type: token` (the default; `token`, optional `username`), `bearer`
/// (`token`) or `basic` (`username`, `password`).
fn git_auth(
    cx: &mut Ctx<'_>,
    auth: &crate::config::file::GitAuthFile,
    at: &Origin,
    key: &str,
) -> Option<GitAuth> {
    let type_key = format!("{key}.auth.type");
    let kind = cx.optional(auth.kind.as_ref(), &type_key).map_or_else(
        || "token".to_string(),
        |g| g.value.trim().to_ascii_lowercase(),
    );
    let token_key = format!("{key}.auth.token");
    let misplaced =
        |cx: &mut Ctx<'_>, value: Option<&serde_saphyr::Spanned<String>>, field: &str| {
            if let Some(v) = value {
                let msg = format!("not used with auth type {kind:?}; remove it");
                cx.fail(
                    &format!("{key}.auth.{field}"),
                    &Origin::at(&v.referenced),
                    msg,
                );
            }
        };
    match kind.as_str() {
        "token" => {
            misplaced(cx, auth.password.as_ref(), "password");
            let token = cx.required(auth.token.as_ref(), &token_key, at);
            let username = cx
                .optional(auth.username.as_ref(), &format!("{key}.auth.username"))
                .map(|given| given.value);
            Some(GitAuth::Token {
                username,
                token: Secret::new(token?.value),
            })
        }
        "bearer" => {
            misplaced(cx, auth.username.as_ref(), "username");
            misplaced(cx, auth.password.as_ref(), "password");
            let token = cx.required(auth.token.as_ref(), &token_key, at);
            Some(GitAuth::Bearer(Secret::new(token?.value)))
        }
        "basic" => {
            misplaced(cx, auth.token.as_ref(), "token");
            let auth_key = format!("{key}.auth");
            let login = cx.credentials(
                auth.username.as_ref(),
                auth.password.as_ref(),
                at,
                &auth_key,
                false,
            );
            Some(GitAuth::Basic(login?))
        }
        other => {
            let origin = auth
                .kind
                .as_ref()
                .map_or_else(|| at.clone(), |k| Origin::at(&k.referenced));
            let msg = format!("expected token, bearer or basic, got {other:?}");
            cx.fail(&type_key, &origin, msg);
            None
        }
    }
}

/// `sources[].repositories`: globs of repository paths, each starting with a letter, digit or
/// `*` (a path relative to the source's `url`), without `..` or `\\`.
fn repositories(
    cx: &mut Ctx<'_>,
    list: Option<&Vec<serde_saphyr::Spanned<String>>>,
    key: &str,
) -> Option<Vec<String>> {
    let mut globs = Vec::new();
    let mut ok = true;
    for (j, item) in list.into_iter().flatten().enumerate() {
        let item_key = format!("{key}.repositories[{j}]");
        let Some(given) = cx.string(item, &item_key) else {
            ok = false;
            continue;
        };
        let glob = given.value.trim().trim_start_matches('/').to_string();
        let bad = glob.is_empty()
            || glob.contains('\\')
            || glob.contains('?')
            || glob.split('/').any(|seg| seg == ".." || seg == ".");
        if bad {
            let msg = format!(
                "expected a repository path or glob relative to the source's url, like \"team/*\" or \"infra/deploy.git\", got {:?}",
                given.value
            );
            cx.fail(&item_key, &given.origin, msg);
            ok = false;
        } else {
            globs.push(glob);
        }
    }
    ok.then_some(globs)
}

fn databases(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Database> {
    let mut names = Names::new(ResourceKind::Database);
    let mut entries = Vec::new();
    for (i, spanned) in file.databases.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("databases[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let kinds = ["postgresql", "postgres"];
        cx.kind(entry.kind.as_ref(), &format!("{key}.type"), &kinds);
        let host = cx.required(entry.host.as_ref(), &format!("{key}.host"), &at);
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

fn apis(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Api> {
    let mut names = Names::new(ResourceKind::Api);
    let mut entries = Vec::new();
    for (i, spanned) in file.apis.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("apis[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let url = cx
            .required(entry.url.as_ref(), &format!("{key}.url"), &at)
            .and_then(|given| cx.url(&given, &format!("{key}.url"), &["http", "https"], None));
        let auth = entry
            .auth
            .as_ref()
            .map(|auth| api_auth(cx, &auth.value, &Origin::at(&auth.referenced), &key));
        let allow = cx.allow_rules(entry.allow.as_ref(), &key);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let api = Api {
            name: String::new(),
            url,
            auth,
            allow,
            max_connections,
            tls_ca_file: cx.path(entry.tls_ca_file.as_ref(), &format!("{key}.tls_ca_file")),
        };
        entries.push((explicit, base, api));
    }
    names.finish(entries, |api, name| api.name = name)
}

/// Headers an `apis[].auth` of `type: header` may not set: the bridge or HTTP own them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

/// `apis[].auth`: `type: basic` (the default; `username`, `password`), `bearer` (`token`) or
/// `header` (`name`, `value`).
fn api_auth(
    cx: &mut Ctx<'_>,
    auth: &crate::config::file::ApiAuthFile,
    at: &Origin,
    key: &str,
) -> Option<ApiAuth> {
    let auth_key = format!("{key}.auth");
    let type_key = format!("{auth_key}.type");
    let kind = cx.optional(auth.kind.as_ref(), &type_key).map_or_else(
        || "basic".to_string(),
        |g| g.value.trim().to_ascii_lowercase(),
    );
    let fields = [
        ("username", &auth.username),
        ("password", &auth.password),
        ("token", &auth.token),
        ("name", &auth.name),
        ("value", &auth.value),
    ];
    let used: &[&str] = match kind.as_str() {
        "basic" => &["username", "password"],
        "bearer" => &["token"],
        "header" => &["name", "value"],
        other => {
            let origin = auth
                .kind
                .as_ref()
                .map_or_else(|| at.clone(), |k| Origin::at(&k.referenced));
            let msg = format!("expected basic, bearer or header, got {other:?}");
            cx.fail(&type_key, &origin, msg);
            return None;
        }
    };
    for (field, value) in fields {
        if let Some(v) = value
            && !used.contains(&field)
        {
            let msg = format!("not used with auth type {kind:?}; remove it");
            cx.fail(
                &format!("{auth_key}.{field}"),
                &Origin::at(&v.referenced),
                msg,
            );
        }
    }
    match kind.as_str() {
        "basic" => cx
            .credentials(
                auth.username.as_ref(),
                auth.password.as_ref(),
                at,
                &auth_key,
                false,
            )
            .map(ApiAuth::Basic),
        "bearer" => {
            let token = cx.required(auth.token.as_ref(), &format!("{auth_key}.token"), at);
            Some(ApiAuth::Bearer(Secret::new(token?.value)))
        }
        _ => {
            let name_key = format!("{auth_key}.name");
            let name = cx.required(auth.name.as_ref(), &name_key, at);
            let value = cx.required(auth.value.as_ref(), &format!("{auth_key}.value"), at);
            let name = name.and_then(|given| {
                let parsed = http::HeaderName::from_bytes(given.value.trim().as_bytes()).ok();
                match parsed {
                    Some(h) if !RESERVED_HEADERS.contains(&h.as_str()) => Some(h),
                    _ => {
                        let msg = format!(
                            "expected an HTTP header name such as X-API-Key (not Host, Content-Length or a hop-by-hop header), got {:?}",
                            given.value
                        );
                        cx.fail(&name_key, &given.origin, msg);
                        None
                    }
                }
            });
            let value = value.and_then(|given| {
                if http::HeaderValue::from_str(&given.value).is_ok() {
                    Some(Secret::new(given.value))
                } else {
                    cx.fail(
                        &format!("{auth_key}.value"),
                        &given.origin,
                        "expected printable text without line breaks",
                    );
                    None
                }
            });
            Some(ApiAuth::Header {
                name: name?,
                value: value?,
            })
        }
    }
}

/// `registries[].token_hosts` and `redirect_hosts`: `host` or `host:port` each, lowercased.
fn hosts(
    cx: &mut Ctx<'_>,
    list: Option<&Vec<serde_saphyr::Spanned<String>>>,
    key: &str,
    field: &str,
) -> Vec<String> {
    let mut hosts = Vec::new();
    for (j, item) in list.into_iter().flatten().enumerate() {
        let item_key = format!("{key}.{field}[{j}]");
        let Some(given) = cx.string(item, &item_key) else {
            continue;
        };
        let text = given.value.trim();
        // Stored as the URL parser spells it (lowercase, IDNA, the port only when given), so
        // that it compares with the hosts a registry's answers name.
        let parsed = url::Url::parse(&format!("https://{text}/"))
            .ok()
            .filter(|u| {
                u.host_str().is_some()
                    && u.path() == "/"
                    && u.username().is_empty()
                    && u.query().is_none()
                    && !text.contains(['/', '@', '?', '#'])
            });
        if let Some(u) = parsed {
            let host = u.host_str().unwrap_or_default();
            hosts.push(
                match text
                    .rsplit_once(':')
                    .filter(|(_, p)| p.parse::<u16>().is_ok())
                {
                    Some((_, port)) => format!("{host}:{port}"),
                    None => host.to_string(),
                },
            );
        } else {
            let msg = format!(
                "expected a host or host:port, like \"storage.internal\" or \"storage.internal:8443\", got {:?}",
                given.value
            );
            cx.fail(&item_key, &given.origin, msg);
        }
    }
    hosts
}

/// Why `name` cannot be part of an image name (`CLOUD/{bridge}/{registry}/{repository}`).
pub(super) fn image_name_rule(name: &str) -> String {
    format!(
        "expected lowercase letters and digits, with '.', '_' or '-' only between them (it becomes part of image names: CLOUD/BRIDGE/REGISTRY/REPOSITORY), got {name:?}"
    )
}

fn registries(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Registry> {
    let mut names = Names::new(ResourceKind::Registry);
    let mut entries = Vec::new();
    let mut places = Vec::new();
    for (i, spanned) in file.registries.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("registries[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let url_key = format!("{key}.url");
        let url = cx
            .required(entry.url.as_ref(), &url_key, &at)
            .and_then(|given| cx.url(&given, &url_key, &["http", "https"], Some("https")));
        let auth = entry.auth.as_ref().map(|auth| {
            cx.credentials(
                auth.value.username.as_ref(),
                auth.value.password.as_ref(),
                &Origin::at(&auth.referenced),
                &format!("{key}.auth"),
                false,
            )
        });
        let allow = cx.allow_rules(entry.allow.as_ref(), &key);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let token_hosts = hosts(cx, entry.token_hosts.as_ref(), &key, "token_hosts");
        let redirect_hosts = hosts(cx, entry.redirect_hosts.as_ref(), &key, "redirect_hosts");
        if let Some(name) = &explicit
            && !tunnel::oci::is_path_component(name)
        {
            let origin = entry
                .name
                .as_ref()
                .map_or(at.clone(), |n| Origin::at(&n.referenced));
            cx.fail(&format!("{key}.name"), &origin, image_name_rule(name));
        }
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let registry = Registry {
            name: String::new(),
            url,
            auth,
            token_hosts,
            redirect_hosts,
            allow_push: entry.allow_push.unwrap_or(false),
            allow,
            max_connections,
        };
        places.push((key, at, entry.name.is_none()));
        entries.push((explicit, base, registry));
    }
    let registries = names.finish(entries, |registry, name| registry.name = name);
    // A name derived from the URL's host must fit an image name too (`a--b`, `xn--…` do not).
    for (registry, (key, at, derived)) in registries.iter().zip(&places) {
        if *derived && !tunnel::oci::is_path_component(&registry.name) {
            let msg = format!(
                "{} (derived from the url); give the entry a name",
                image_name_rule(&registry.name)
            );
            cx.fail(&format!("{key}.name"), at, msg);
        }
    }
    registries
}
