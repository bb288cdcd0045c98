//! The resource a forwarded request names, read from its raw path.

use tunnel::ResourceKind;

/// Which resource a consumer's request names, read from the request's raw path (axum's path
/// parameters are percent-decoded): `%2F` stays `%2F` for the bridge's path check, `%20` and
/// `%3F` stay in the path, and bytes that are not UTF-8 pass as sent.
pub(super) struct Target {
    /// The resource's kind, from the route.
    pub(super) kind: ResourceKind,
    /// The bridge's name.
    pub(super) bridge: String,
    /// The resource's name (its entry in the bridge's config).
    pub(super) name: String,
    /// The path inside the resource, with its leading `/`, still percent-encoded.
    pub(super) rest: String,
}

impl Target {
    /// The target of `raw_path` under the route `matched` (`/v1/bridges/{bridge}/apis/{name}/{*path}`
    /// and the like): a segment of the route names which segment of the path is the bridge or
    /// the resource, and `{*…}` takes the rest. Segments match one for one, as the router
    /// matched them.
    pub(super) fn new(kind: ResourceKind, matched: &str, raw_path: &str) -> Self {
        let mut target = Target {
            kind,
            bridge: String::new(),
            name: String::new(),
            rest: "/".to_string(),
        };
        let mut raw = raw_path.strip_prefix('/').unwrap_or(raw_path);
        for pattern in matched.strip_prefix('/').unwrap_or(matched).split('/') {
            if pattern.starts_with("{*") {
                target.rest = format!("/{raw}");
                break;
            }
            let (segment, after) = raw.split_once('/').unwrap_or((raw, ""));
            match pattern {
                "{bridge}" => target.bridge = segment.to_string(),
                "{name}" => target.name = segment.to_string(),
                _ => {}
            }
            raw = after;
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "/v1/bridges/{bridge}/apis/{name}/{*path}";

    #[test]
    fn the_rest_keeps_its_percent_encoding() {
        let t = Target::new(
            ResourceKind::Api,
            ROUTE,
            "/v1/bridges/dc1/apis/internal/items/a%20b/%3F%FF",
        );
        assert_eq!(
            (t.bridge.as_str(), t.name.as_str(), t.rest.as_str()),
            ("dc1", "internal", "/items/a%20b/%3F%FF")
        );
        let t = Target::new(
            ResourceKind::Api,
            ROUTE,
            "/v1/bridges/dc1/apis/internal/a%2Fb",
        );
        assert_eq!(t.rest, "/a%2Fb");
    }

    #[test]
    fn a_route_without_a_rest_reaches_the_root() {
        for (route, path) in [
            (
                "/v1/bridges/{bridge}/apis/{name}",
                "/v1/bridges/dc1/apis/internal",
            ),
            (
                "/v1/bridges/{bridge}/apis/{name}/",
                "/v1/bridges/dc1/apis/internal/",
            ),
        ] {
            let t = Target::new(ResourceKind::Api, route, path);
            assert_eq!(
                (t.bridge.as_str(), t.name.as_str(), t.rest.as_str()),
                ("dc1", "internal", "/")
            );
        }
    }
}
