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

    /// `(bridge, name, rest)` of `raw_path` under `pattern`.
    fn parts(pattern: &str, raw_path: &str) -> (String, String, String) {
        let t = Target::new(ResourceKind::Api, pattern, raw_path);
        (t.bridge, t.name, t.rest)
    }

    fn owned(bridge: &str, name: &str, rest: &str) -> (String, String, String) {
        (bridge.into(), name.into(), rest.into())
    }

    #[test]
    fn the_routes_segments_are_read_from_the_raw_path() {
        for kind in crate::relay::FORWARDED_KINDS {
            let segment = kind.segment();
            let [root, slash, under] = crate::relay::forwarded_routes(kind);
            let base = format!("/v1/bridges/dc1/{segment}/internal");
            assert_eq!(parts(&root, &base), owned("dc1", "internal", "/"));
            assert_eq!(
                parts(&slash, &format!("{base}/")),
                owned("dc1", "internal", "/")
            );
            // The rest keeps its percent-encoding, and an empty segment inside it.
            assert_eq!(
                parts(&under, &format!("{base}/items/a%20b//%3F%FF%2F")),
                owned("dc1", "internal", "/items/a%20b//%3F%FF%2F")
            );
        }
    }

    #[test]
    fn the_registry_route_gives_the_whole_image_name() {
        assert_eq!(
            parts("/v2/{*path}", "/v2/dc1/hub/team/app/manifests/1.0"),
            owned("", "", "/dc1/hub/team/app/manifests/1.0")
        );
    }
}
