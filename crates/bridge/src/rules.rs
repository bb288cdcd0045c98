//! Which requests a resource lets through: path hygiene (no way out of the resource's base)
//! and the entry's `allow` rules.

use crate::config::AllowRule;

/// Refuses dot segments, encoded slashes/dots/backslashes: no way out of the resource's base.
pub fn path_is_clean(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    if ["%2f", "%5c", "%2e", "\\", "%00"]
        .iter()
        .any(|bad| lower.contains(bad))
    {
        return false;
    }
    !path.split('/').any(|seg| seg == ".." || seg == ".")
}

/// The first matching rule (`METHOD path-glob`), or everything when no rules are given.
pub fn allowed(rules: &[AllowRule], method: &str, path: &str) -> Option<String> {
    if rules.is_empty() {
        return Some("default: all".into());
    }
    rules
        .iter()
        .find(|r| (r.method == "*" || r.method.eq_ignore_ascii_case(method)) && glob(&r.path, path))
        .map(|r| format!("{} {}", r.method, r.path))
}

/// `*` matches any run of characters (including `/`).
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_paths_are_refused() {
        assert!(path_is_clean("/v1/items/3"));
        for bad in [
            "/../etc",
            "/a/./b",
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a\\b",
            "/a/..",
        ] {
            assert!(!path_is_clean(bad), "{bad}");
        }
    }

    #[test]
    fn allow_rules() {
        let rules = vec![AllowRule {
            method: "GET".into(),
            path: "/v1/*".into(),
        }];
        assert!(allowed(&rules, "GET", "/v1/items").is_some());
        assert!(allowed(&rules, "POST", "/v1/items").is_none());
        assert!(allowed(&rules, "GET", "/admin").is_none());
        assert!(allowed(&[], "DELETE", "/x").is_some());
    }
}
