//! Validation of the resource lists, one module per kind: [`git`] (`sources`), [`database`]
//! (`databases`), [`api`] (`apis`), [`registry`] (`registries`).

mod api;
mod database;
mod git;
mod registry;

use crate::config::MAX_MAX_CONNECTIONS;
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
