//! Validation of the resource lists, one module per kind: [`git`] (`sources`), [`database`]
//! (`databases`), [`api`] (`apis`), [`registry`] (`registries`).

mod api;
mod database;
mod git;
mod registry;

use crate::config::MAX_MAX_CONNECTIONS;
use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{Api, Database, GitSource, Registry};

use super::fields::{Ctx, located};
pub(super) use registry::image_name_rule;

/// Every resource list, validated and named.
pub(super) fn all(
    cx: &mut Ctx<'_>,
    file: &FileConfig,
) -> (Vec<GitSource>, Vec<Database>, Vec<Api>, Vec<Registry>) {
    (
        git::sources(cx, file),
        database::databases(cx, file),
        api::apis(cx, file),
        registry::registries(cx, file),
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

/// An `auth` block's `type`, trimmed and lowercased (`default` when absent), if it is one of
/// `known`; any other is reported on `{auth_key}.type`, naming the expected ones.
fn auth_type(
    cx: &mut Ctx<'_>,
    kind: Option<&serde_saphyr::Spanned<String>>,
    at: &Origin,
    auth_key: &str,
    default: &str,
    known: &[&str],
) -> Option<String> {
    let type_key = format!("{auth_key}.type");
    let given = cx.optional(kind, &type_key).map_or_else(
        || default.to_string(),
        |g| g.value.trim().to_ascii_lowercase(),
    );
    if known.contains(&given.as_str()) {
        return Some(given);
    }
    let origin = kind.map_or_else(|| at.clone(), |k| Origin::at(&k.referenced));
    let expected = match known.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    cx.fail(
        &type_key,
        &origin,
        format!("expected {expected}, got {given:?}"),
    );
    None
}

/// Reports each field of an `auth` block of type `kind` that the type does not use.
fn unused_auth_fields(
    cx: &mut Ctx<'_>,
    auth_key: &str,
    kind: &str,
    fields: &[(&str, Option<&serde_saphyr::Spanned<String>>)],
    used: &[&str],
) {
    for (field, value) in fields {
        if let Some(v) = value
            && !used.contains(field)
        {
            let msg = format!("not used with auth type {kind:?}; remove it");
            cx.fail(
                &format!("{auth_key}.{field}"),
                &Origin::at(&v.referenced),
                msg,
            );
        }
    }
}
