//! How resources are named on the wire: the cloud forwards `/{kind}/{name}/{rest}` through the
//! tunnel, and the bridge maps that back to one declared entry.

use serde::{Deserialize, Serialize};

/// The longest name of a resource entry.
pub const MAX_RESOURCE_NAME_LEN: usize = 63;

/// What [`is_valid_resource_name`] accepts, for error messages on both sides.
pub const RESOURCE_NAME_RULE: &str =
    "1-63 characters of letters, digits, '-', '_' or '.' (not only dots)";

/// A resource entry's name (a source, database, API or registry): the bridge refuses a config
/// with another, and the cloud refuses to route to one, so a name that one side takes the
/// other does too. It is a URL path segment, hence no `/`, and not `.` or `..`.
pub fn is_valid_resource_name(name: &str) -> bool {
    (1..=MAX_RESOURCE_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.bytes().all(|b| b == b'.')
}

/// The four kinds of resource a bridge can expose. One vocabulary everywhere: the bridge's
/// configuration lists, the cloud's routes, audit records, metric labels and `/v1/bridges`
/// all name a kind through this type (`api`, `git`, `registry`, `database`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    /// Internal HTTP APIs (`apis`).
    Api,
    /// Git servers reached over smart HTTP (`sources` with `type: git`).
    Git,
    /// OCI registries (`registries`).
    Registry,
    /// PostgreSQL databases (`databases`).
    Database,
}

impl ResourceKind {
    /// Every kind, in the order the configuration lists them.
    pub const ALL: [ResourceKind; 4] = [Self::Git, Self::Database, Self::Api, Self::Registry];

    /// The lowercase name used in audit records, metric labels and JSON: `api`, `git`,
    /// `registry` or `database`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Api => "api",
            ResourceKind::Git => "git",
            ResourceKind::Registry => "registry",
            ResourceKind::Database => "database",
        }
    }

    /// The bridge configuration list that declares this kind (`sources`, `apis`, ...).
    pub fn list_key(self) -> &'static str {
        match self {
            ResourceKind::Api => "apis",
            ResourceKind::Git => "sources",
            ResourceKind::Registry => "registries",
            ResourceKind::Database => "databases",
        }
    }

    /// The kind in words, for messages: "Git source", "internal API", ….
    pub fn noun(self) -> &'static str {
        match self {
            ResourceKind::Api => "internal API",
            ResourceKind::Git => "Git source",
            ResourceKind::Registry => "registry",
            ResourceKind::Database => "database",
        }
    }

    /// The first path segment inside the tunnel, as in the cloud's URLs.
    pub fn segment(self) -> &'static str {
        match self {
            ResourceKind::Api => "apis",
            ResourceKind::Git => "git",
            ResourceKind::Registry => "registries",
            ResourceKind::Database => "databases",
        }
    }

    /// The kind whose segment this is.
    pub fn from_segment(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.segment() == s)
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a bridge tells the cloud about one resource: never its URL or credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Kind of resource.
    pub kind: ResourceKind,
    /// Its unique name in the bridge's config.
    pub name: String,
    /// A Git source's `repositories` globs, when it has some and they fit in
    /// [`crate::repositories::MAX_ANNOUNCED`], each [`crate::repositories::encoded`]: the
    /// cloud checks repository mappings against them. Absent (older bridges, other kinds,
    /// globs that did not fit): any path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repositories: Option<Vec<String>>,
}

/// Splits a tunnel path `/{kind}/{name}/{rest…}` into its parts; `rest` keeps its leading `/`.
pub fn split_tunnel_path(path: &str) -> Option<(ResourceKind, &str, &str)> {
    let rest = path.strip_prefix('/')?;
    let (kind, rest) = rest.split_once('/')?;
    let kind = ResourceKind::from_segment(kind)?;
    let (name, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!name.is_empty()).then_some((kind, name, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnel_paths() {
        assert_eq!(
            split_tunnel_path("/apis/billing/v1/items"),
            Some((ResourceKind::Api, "billing", "/v1/items"))
        );
        assert_eq!(
            split_tunnel_path("/apis/billing"),
            Some((ResourceKind::Api, "billing", "/"))
        );
        assert_eq!(split_tunnel_path("/nope/x/y"), None);
        assert_eq!(split_tunnel_path("/apis//y"), None);
    }
}
