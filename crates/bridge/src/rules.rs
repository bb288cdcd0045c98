//! Which requests a resource lets through: path hygiene (no way out of the resource's base)
//! and the entry's `allow` rules.

use unicode_normalization::UnicodeNormalization;

/// One `allow` rule: a method (`GET`, or `*` for any) and a path pattern in which `*` matches
/// any run of characters. The config checks its shape ([`crate::config`]); [`allowed`] matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// Upper-case method or `*`.
    pub method: String,
    /// Path pattern, starting with `/` or `*`.
    pub path: String,
}

/// Refuses dot segments (also `..;x`, which Java servers read as `..`, and segments other
/// servers may read as one: see [`reads_as_dots`]), encoded slashes, dots,
/// backslashes, semicolons and percent signs (a double encoding decoded twice downstream),
/// NUL, a `%` without two hex digits (`%u002e`, IIS's own escape) and overlong UTF-8
/// (`%c0%ae`, a `.` to old servers), and what Unicode normalisation (NFKC) makes any of those
/// (`..／`, full-width dots and a slash): no way out of the resource's base, whatever the
/// internal server's URL rules. Other bytes that are no UTF-8 (`%ff`) pass as sent.
pub fn path_is_clean(path: &str) -> bool {
    path_problem(path).is_none()
}

/// What [`path_is_clean`] refuses in `path`, in words, for the caller: the first thing found.
pub fn path_problem(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let escaped = [
        ("%2f", "an encoded slash (%2F)"),
        ("%5c", "an encoded backslash (%5C)"),
        ("%2e", "an encoded dot (%2E)"),
        ("%3b", "an encoded semicolon (%3B)"),
        ("%25", "an encoded percent sign (%25: a double encoding)"),
        ("\\", "a backslash"),
        ("%00", "an encoded NUL (%00)"),
    ];
    if let Some((_, what)) = escaped.iter().find(|(bad, _)| lower.contains(bad)) {
        return Some(what);
    }
    if !escapes_are_plain(&lower) {
        return Some(
            "a '%' without two hex digits, or an overlong UTF-8 form of '.', '/', '\\', '%' or ';'",
        );
    }
    // What a server that normalises Unicode (NFKC) reads: full-width and other compatibility
    // forms become their ASCII letters, so `..／` is `../` and `％２ｅ` an escape there.
    let text = decoded(path);
    let normal = if text.is_ascii() {
        text
    } else {
        std::borrow::Cow::Owned(text.nfkc().collect())
    };
    if normal.split('/').any(reads_as_dots) {
        return Some(
            "a '..' or '.' segment, or one a server may read as one (dots with blanks, an NTFS stream name such as ..::$INDEX_ALLOCATION, or full-width dots and slashes, which Unicode normalisation makes '.' and '/')",
        );
    }
    if normal.contains('\\') {
        return Some(
            "a look-alike of '\\' that Unicode normalisation turns into one (a full-width backslash, %EF%BC%BC)",
        );
    }
    if !escapes_absent(&normal) {
        return Some(
            "a look-alike of '%' that Unicode normalisation turns into an escape (a full-width percent sign, %EF%BC%85)",
        );
    }
    None
}

/// Whether no `%` of `text` starts two hex digits: an escape a server would decode once more.
fn escapes_absent(text: &str) -> bool {
    !text.match_indices('%').any(|(at, _)| escape_at(text, at))
}

pub use tunnel::repositories::{decoded, glob};

/// Whether a segment (decoded and normalised) is `.` or `..`, or may be read as one by some
/// internal server: only dots once the part after a `;` (Java's parameters) or a `:` (NTFS's
/// `::$INDEX_ALLOCATION`) is cut off and blanks are trimmed (Windows trims trailing dots and
/// spaces, so `...` and `.. ` are `..` there).
fn reads_as_dots(segment: &str) -> bool {
    let name = segment.split([';', ':']).next().unwrap_or_default().trim();
    !name.is_empty() && name.chars().all(|c| c == '.')
}

/// Whether the `%` at byte `at` of `text` starts two hex digits: an escape.
fn escape_at(text: &str, at: usize) -> bool {
    text.as_bytes()
        .get(at + 1..at + 3)
        .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
}

/// Whether every `%` of `path` starts two hex digits.
fn escapes_complete(path: &str) -> bool {
    path.match_indices('%').all(|(at, _)| escape_at(path, at))
}

/// Whether every `%` of `path` (lower case) starts two hex digits, and the bytes they encode
/// hold no overlong UTF-8 form of a character that matters to a path (`.`, `/`, `\\`, `%`,
/// `;`, NUL): the 2- to 6-byte forms old decoders read as those characters. Other bytes,
/// legacy encodings' (`%c0%cc`, EUC-KR) included, pass as sent.
fn escapes_are_plain(path: &str) -> bool {
    if !escapes_complete(path) {
        return false;
    }
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
    !(0..decoded.len()).any(|i| overlong_path_char(&decoded[i..]))
}

/// Whether `bytes` start with an overlong UTF-8 sequence (a lead byte, then continuation
/// bytes, encoding a value below 0x80) whose value is a character that matters to a path.
fn overlong_path_char(bytes: &[u8]) -> bool {
    let (len, lead_bits) = match bytes.first() {
        Some(&b @ 0xc0..=0xc1) => (2, b & 0x1f),
        Some(&b @ 0xe0) => (3, b & 0x0f),
        Some(&b @ 0xf0) => (4, b & 0x07),
        Some(&b @ 0xf8) => (5, b & 0x03),
        Some(&b @ 0xfc) => (6, b & 0x01),
        _ => return false,
    };
    let Some(tail) = bytes.get(1..len) else {
        return false;
    };
    if !tail.iter().all(|b| (0x80..=0xbf).contains(b)) {
        return false;
    }
    let value = tail
        .iter()
        .fold(u32::from(lead_bits), |v, b| (v << 6) | u32::from(b & 0x3f));
    matches!(value, 0x2e | 0x2f | 0x5c | 0x25 | 0x3b | 0x00)
}

/// Methods never forwarded, whatever the allow rules: `TRACE` (and IIS's `TRACK`) echoes the
/// request, with the credentials the bridge injected, back to the caller; `CONNECT` would
/// open a raw tunnel.
pub fn method_is_forbidden(method: &str) -> bool {
    ["TRACE", "TRACK", "CONNECT"]
        .iter()
        .any(|m| method.eq_ignore_ascii_case(m))
}

/// The first matching rule (`METHOD path-glob`), or everything when no rules are given.
pub fn allowed(rules: &[AllowRule], method: &str, path: &str) -> Option<String> {
    if rules.is_empty() {
        return Some("default: all".into());
    }
    rules
        .iter()
        // Methods are case-sensitive (RFC 9110 §9.1): a rule for GET admits `GET`, not `get`;
        // and `HEAD`, which asks for GET's answer without its body (RFC 9110 §9.3.2).
        .find(|r| {
            let admits =
                r.method == "*" || r.method == method || (r.method == "GET" && method == "HEAD");
            admits && glob(&r.path, path)
        })
        .map(|r| format!("{} {}", r.method, r.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_paths_are_refused() {
        assert!(path_is_clean("/v1/items/3"));
        assert!(path_problem("/a/../b").is_some_and(|w| w.starts_with("a '..' or '.' segment")));
        assert_eq!(path_problem("/a%2Fb"), Some("an encoded slash (%2F)"));
        assert!(
            path_problem("/%EF%BC%852e%EF%BC%852e/etc")
                .is_some_and(|w| w.contains("full-width percent sign"))
        );
        assert!(path_problem("/a%EF%BC%BCb").is_some_and(|w| w.contains("full-width backslash")));
        assert_eq!(
            path_problem("/a/%c0%ae%c0%ae/b").map(|w| w.starts_with("a '%' without")),
            Some(true)
        );
        for bad in [
            "/../etc",
            "/a/./b",
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a\\b",
            "/a/..",
            "/public/..;/admin",
            "/public/..%3b/admin",
            "/public/%252e%252e/admin",
            "/a/.;x/b",
            "/a/%c0%ae%c0%ae/b",
            "/..%c0%af",
            "/a/%e0%80%ae",
            "/a/%f0%80%80%ae",
            "/a/%f8%80%80%80%ae%f8%80%80%80%ae/b",
            "/a/%fc%80%80%80%80%af/b",
            "/a/%c1%9c",
            "/%u002e%u002e/x",
            "/a%",
            "/a%4",
            "/a%zz",
            "/public/..%20/admin",
            "/public/..%09/admin",
            "/public/%20../admin",
            "/public/.../admin",
            "/public/..::$INDEX_ALLOCATION/admin",
            "/public/..%3a%3a/admin",
            "/public/%ef%bc%8e%ef%bc%8e/admin",
            "/public/%e2%80%a4/admin",
            "/public/%e2%80%a5/admin",
            "/public/%e2%80%a6/admin",
            "/pub/%E2%80%A5%EF%BC%8F%E2%80%A5%EF%BC%8Fadmin",
            "/pub/..%EF%BC%8F..%EF%BC%8Fadmin",
            "/pub/..%ef%bc%bcadmin",
            "/pub/%e2%80%a5%ef%bc%9b/admin",
            "/pub/%EF%BC%85%32%65",
            "/pub/..\u{FF0F}admin",
            "/pub/%EF%B8%B0/admin",
            "/pub/..%CD%BE/admin",
        ] {
            assert!(!path_is_clean(bad), "{bad}");
        }
        // Bytes that are no UTF-8, and real multi-byte characters, pass as sent.
        for good in [
            "/v1/blobs/%ff%fe",
            "/v1/caf%c3%a9",
            "/v1/%e2%82%ac",
            "/v1/%E3%83%AC%EF%BC%9A2024",
            "/v1/2024%EF%BC%8F01",
            "/v1/%EF%BC%95%EF%BC%90%EF%BC%85.txt",
            "/v1/%f0%9f%98%80",
            "/files/%C0propos",
            "/%C0%CC",
            "/%C0%B4",
            "/%C0",
            "/v1/a..b",
            "/v1/..hidden",
            "/v1/%20",
            "/v1/time:12",
            "/v2/team/app/manifests/sha256:abc",
        ] {
            assert!(path_is_clean(good), "{good}");
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
        assert!(allowed(&rules, "get", "/v1/items").is_none());
        assert!(
            allowed(&rules, "HEAD", "/v1/items").is_some(),
            "HEAD is GET's"
        );
        assert!(allowed(&rules, "GeT", "/v1/items").is_none());
    }

    #[test]
    fn globs_match_like_before_and_stay_linear() {
        for (pattern, text, want) in [
            ("/v1/*", "/v1/a/b", true),
            ("/v1/*", "/v2/a", false),
            ("*", "", true),
            ("/a/*/c", "/a/b/x/c", true),
            ("/a/*/c", "/a/b/x/d", false),
            ("/repos/*/*/contents/*", "/repos/o/r/contents/p/q", true),
            ("/x*y*z", "/xaaybbz", true),
            ("/x*y*z", "/xaaybb", false),
        ] {
            assert_eq!(glob(pattern, text), want, "{pattern} ~ {text}");
        }
        // Exponential for a backtracking matcher; instant here.
        let hostile = format!("/repos/{}", "/contents/".repeat(1600));
        assert!(!glob("/repos/*/*/*/contents/*x", &hostile));
        assert!(method_is_forbidden("trace") && method_is_forbidden("CONNECT"));
        assert!(!method_is_forbidden("GET"));
    }
}
