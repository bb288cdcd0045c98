//! What the OCI distribution API fixes for both sides of a registry pull: the error body that
//! registry clients (skopeo, podman, docker) print, the API version header, and the rule for
//! the path components that bridge and registry names become in an image name
//! (`CLOUD/{bridge}/{registry}/{repository}`), and how a blob mount's source named so becomes
//! the registry's own name.

use std::borrow::Cow;

/// The header that marks a registry's answers.
pub const API_VERSION_HEADER: &str = "docker-distribution-api-version";
/// Its one value.
pub const API_VERSION: &str = "registry/2.0";

/// The OCI error code for an HTTP status the cloud or the bridge answers with.
pub fn error_code(status: u16) -> &'static str {
    match status {
        // A request the cloud or the bridge cannot pass on as sent (a transfer coding, a body
        // longer than its length); a malformed path is `NAME_INVALID` ([`path_error_body`]).
        400 => "UNSUPPORTED",
        401 => "UNAUTHORIZED",
        403 => "DENIED",
        404 => "NAME_UNKNOWN",
        405 => "UNSUPPORTED",
        429 => "TOOMANYREQUESTS",
        _ => "UNAVAILABLE",
    }
}

/// `{"errors":[{"code":…,"message":…}]}`: clients show the message to their user.
pub fn error_body(status: u16, message: &str) -> String {
    serde_json::json!({"errors": [{"code": error_code(status), "message": message}]}).to_string()
}

/// The error body for a path refused as malformed (an encoded slash, a dot segment): it names
/// no repository a registry could have.
pub fn path_error_body(message: &str) -> String {
    serde_json::json!({"errors": [{"code": "NAME_INVALID", "message": message}]}).to_string()
}

/// Whether `name` can be a path component of an image name: lowercase letters and digits,
/// with `.`, `_` or `-` only between them (the OCI distribution grammar, without `__`).
pub fn is_path_component(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.windows(2).all(|w| alnum(&w[0]) || alnum(&w[1]))
        && bytes.iter().all(|b| alnum(b) || b"._-".contains(b))
}

/// A cross-repository blob mount (`POST …/blobs/uploads/?mount=D&from=REPO`) names its source
/// as the client knows it, `{bridge}/{registry}/{repository}`; the registry knows it as
/// `{repository}`. Returns `query` with a `from` that starts with one of `prefixes`
/// (`{bridge}/{registry}/`) cut to the repository, borrowed when none does: the cloud cuts its
/// stream's own entry, the bridge another of its entries on the same registry.
pub fn mount_source_as_registry_knows<'q>(query: &'q str, prefixes: &[String]) -> Cow<'q, str> {
    let cut = |key: &str, value: &str| -> Option<usize> {
        (key == "from")
            .then(|| prefixes.iter().find(|p| value.starts_with(p.as_str())))
            .flatten()
            .map(String::len)
    };
    let pairs = url::form_urlencoded::parse(query.as_bytes());
    if !pairs.clone().any(|(k, v)| cut(&k, &v).is_some()) {
        return query.into();
    }
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        let value = match cut(&key, &value) {
            Some(len) => &value[len..],
            None => &value,
        };
        out.append_pair(&key, value);
    }
    out.finish().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_source_is_named_as_the_registry_knows_it() {
        let own = ["dc1/rw/".to_string()];
        for (query, want) in [
            (
                "mount=sha256%3Aab&from=dc1%2Frw%2Fteam%2Fapp",
                "mount=sha256%3Aab&from=team%2Fapp",
            ),
            (
                "mount=sha256:ab&from=dc1/rw/team/app",
                "mount=sha256%3Aab&from=team%2Fapp",
            ),
            (
                "mount=sha256:ab&from=dc2/rw/team/app",
                "mount=sha256:ab&from=dc2/rw/team/app",
            ),
            ("n=10", "n=10"),
        ] {
            assert_eq!(mount_source_as_registry_knows(query, &own), want, "{query}");
        }
        // Any of several entries (the bridge's on the same registry).
        let siblings = ["dc1/rw/".to_string(), "dc1/reg/".to_string()];
        assert_eq!(
            mount_source_as_registry_knows("from=dc1/reg/team/app&mount=d", &siblings),
            "from=team%2Fapp&mount=d"
        );
        assert_eq!(
            mount_source_as_registry_knows("from=dc1/other/team/app", &siblings),
            "from=dc1/other/team/app"
        );
    }

    #[test]
    fn path_components() {
        for ok in ["dc1", "registry.internal", "a-b_c.d", "127.0.0.1"] {
            assert!(is_path_component(ok), "{ok}");
        }
        for bad in ["", "Dc1", "-a", "a-", "a..b", "a_-b", "a/b", "a:b"] {
            assert!(!is_path_component(bad), "{bad}");
        }
    }
}
