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

/// What an `auth` block may hold: each `type` with the fields it uses.
type AuthTypes<'a> = &'a [(&'a str, &'a [&'a str])];

/// An `auth` block's `type`, trimmed and lowercased (`default` when absent), if it is one of
/// `types`; any other is reported on `{auth_key}.type`, naming the expected ones. Each of
/// `fields` that is given but not used by the type is reported too.
fn auth_type(
    cx: &mut Ctx<'_>,
    auth_key: &str,
    at: &Origin,
    (kind, default): (Option<&serde_saphyr::Spanned<String>>, &str),
    types: AuthTypes<'_>,
    fields: &[(&str, Option<&serde_saphyr::Spanned<String>>)],
) -> Option<String> {
    let type_key = format!("{auth_key}.type");
    let given = cx.optional(kind, &type_key).map_or_else(
        || default.to_string(),
        |g| g.value.trim().to_ascii_lowercase(),
    );
    let Some((_, used)) = types.iter().find(|(name, _)| *name == given) else {
        let origin = kind.map_or_else(|| at.clone(), |k| Origin::at(&k.referenced));
        let names: Vec<&str> = types.iter().map(|(name, _)| *name).collect();
        let expected = match names.split_last() {
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        cx.fail(
            &type_key,
            &origin,
            format!("expected {expected}, got {given:?}"),
        );
        return None;
    };
    let given_fields: Vec<&str> = (fields.iter())
        .filter(|(_, value)| value.is_some())
        .map(|(field, _)| *field)
        .collect();
    // No `type`, and fields of another type (`username` and `password` under a Git source,
    // whose default is `token`): the type is what is missing, not the default's fields.
    let fits = |used: &[&str]| given_fields.iter().all(|f| used.contains(f));
    if kind.is_none() && !fits(used) {
        let meant = types.iter().find(|(_, used)| fits(used));
        if let Some((meant, _)) = meant {
            cx.fail(
                &type_key,
                at,
                format!(
                    "missing: without it the type is {default:?}, which does not use {}; add `type: {meant}`",
                    given_fields.join(" and ")
                ),
            );
            return None;
        }
    }
    for (field, value) in fields {
        if let Some(v) = value
            && !used.contains(field)
        {
            let msg = format!("not used with auth type {given:?}; remove it");
            cx.fail(
                &format!("{auth_key}.{field}"),
                &Origin::at(&v.referenced),
                msg,
            );
        }
    }
    Some(given)
}
