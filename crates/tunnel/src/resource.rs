//! How resources are named on the wire: the cloud forwards `/{kind}/{name}/{rest}` through the
//! tunnel, and the bridge maps that back to one declared entry.

use serde::{Deserialize, Serialize};

/// The four kinds of resource a bridge can expose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    /// Internal HTTP APIs (`apis`).
    Api,
    /// Git servers (`sources`).
    Git,
    /// OCI registries (`registries`).
    Registry,
    /// PostgreSQL databases (`databases`).
    Database,
}

impl ResourceKind {
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
        [Self::Api, Self::Git, Self::Registry, Self::Database]
            .into_iter()
            .find(|k| k.segment() == s)
    }
}

/// What a bridge tells the cloud about one resource: never its URL or credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Kind of resource.
    pub kind: ResourceKind,
    /// Its unique name in the bridge's config.
    pub name: String,
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
