//! Validation of the resource lists: `sources`, `databases`, `apis`, `registries`.

use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{
    Api, DEFAULT_POSTGRES_PORT, Database, DatabaseEngine, Registry, ResourceKind, Source, TokenAuth,
};
use crate::config::{MAX_MAX_CONNECTIONS, Secret};

use super::fields::{Ctx, Names, located};

/// Every resource list, validated and named.
pub(super) fn all(
    cx: &mut Ctx<'_>,
    file: &FileConfig,
) -> (Vec<Source>, Vec<Database>, Vec<Api>, Vec<Registry>) {
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

fn sources(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Source> {
    let mut names = Names::new(ResourceKind::Source);
    let mut entries = Vec::new();
    for (i, spanned) in file.sources.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("sources[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        cx.kind(entry.kind.as_ref(), &format!("{key}.type"), &["git"]);
        let url = cx
            .required(entry.url.as_ref(), &format!("{key}.url"), &at)
            .and_then(|given| cx.url(&given, &format!("{key}.url"), &["http", "https"], None));
        let auth = entry.auth.as_ref().map(|auth| {
            let auth_at = Origin::at(&auth.referenced);
            cx.kind(
                auth.value.kind.as_ref(),
                &format!("{key}.auth.type"),
                &["token"],
            );
            let token_key = format!("{key}.auth.token");
            let token = cx.required(auth.value.token.as_ref(), &token_key, &auth_at);
            let username = cx
                .optional(
                    auth.value.username.as_ref(),
                    &format!("{key}.auth.username"),
                )
                .map(|given| given.value);
            token.map(|token| TokenAuth {
                username,
                token: Secret::new(token.value),
            })
        });
        let allow = cx.allow_rules(entry.allow.as_ref(), &key);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let source = Source {
            name: String::new(),
            url,
            auth,
            allow_push: entry.allow_push.unwrap_or(false),
            allow,
            max_connections,
        };
        entries.push((explicit, base, source));
    }
    names.finish(entries, |source, name| source.name = name)
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
        let (Some(host), Some(database), Some(credentials)) = (host, database, credentials) else {
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
        let auth = entry.auth.as_ref().map(|auth| {
            let auth_key = format!("{key}.auth");
            cx.kind(
                auth.value.kind.as_ref(),
                &format!("{auth_key}.type"),
                &["basic"],
            );
            cx.credentials(
                auth.value.username.as_ref(),
                auth.value.password.as_ref(),
                &Origin::at(&auth.referenced),
                &auth_key,
                false,
            )
        });
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
        };
        entries.push((explicit, base, api));
    }
    names.finish(entries, |api, name| api.name = name)
}

fn registries(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Registry> {
    let mut names = Names::new(ResourceKind::Registry);
    let mut entries = Vec::new();
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
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let registry = Registry {
            name: String::new(),
            url,
            auth,
            allow,
            max_connections,
        };
        entries.push((explicit, base, registry));
    }
    names.finish(entries, |registry, name| registry.name = name)
}
