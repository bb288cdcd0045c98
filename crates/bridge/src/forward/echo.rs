//! An internal system that writes the request's headers back into its answer's headers (a
//! debugging endpoint, a redirect that carries them in its query) would hand the credentials
//! the bridge injected to the caller. Before an answer goes back, every header holding the
//! injected credential, whole or in part, is removed (trailers too), and the operator is told
//! which.
//! A body cannot be checked without holding it whole: docs/bridge.md says so.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use memchr::memmem::Finder;

/// Shorter forms are not looked for: they would turn up in unrelated values by chance.
const SHORTEST: usize = crate::config::SHORTEST_SECRET;

/// The forms of an entry's injected credentials to look for in its answers' headers and
/// trailers, made once when the bridge starts, each with its searcher ready (every answer
/// of such an entry is searched, so the search is kept cheap).
#[derive(Clone)]
pub struct Echoes(Arc<[Finder<'static>]>);

impl Echoes {
    /// The forms of `injected` (the credentials' header value as the bridge sends it) worth
    /// looking for, each only when 8 characters or longer: the value; what follows its scheme
    /// word (`Basic`, `Bearer`), also without base64's `=` padding and in base64url's
    /// spelling; and for `Basic` the password it encodes. None for an entry without
    /// credentials.
    pub fn of(injected: Option<&str>) -> Echoes {
        use base64::Engine;
        let Some(injected) = injected else {
            return Echoes(Arc::from([]));
        };
        let mut forms = vec![injected.to_string()];
        if let Some((scheme, rest)) = injected.split_once(' ') {
            let unpadded = rest.trim_end_matches('=');
            let url_safe: String = unpadded
                .chars()
                .map(|c| match c {
                    '+' => '-',
                    '/' => '_',
                    c => c,
                })
                .collect();
            forms.extend([rest.to_string(), unpadded.to_string(), url_safe]);
            if scheme.eq_ignore_ascii_case("basic")
                && let Ok(pair) = base64::engine::general_purpose::STANDARD.decode(rest)
                && let Ok(pair) = String::from_utf8(pair)
                && let Some((_, password)) = pair.split_once(':')
            {
                forms.push(password.to_string());
            }
        }
        forms.retain(|f| f.len() >= SHORTEST);
        forms.sort();
        forms.dedup();
        // A form that holds another (the value holds its token, a padded token the unpadded
        // one) is found whenever it is there: only the others are searched for.
        let needed = forms.iter().filter(|f| {
            !forms
                .iter()
                .any(|other| other != *f && f.contains(other.as_str()))
        });
        Echoes(
            needed
                .map(|f| Finder::new(f.as_bytes()).into_owned())
                .collect(),
        )
    }

    fn holds(&self, text: &[u8]) -> bool {
        self.0.iter().any(|form| form.find(text).is_some())
    }

    /// Whether `value` holds one of the forms: as sent, percent-decoded, or decoded as a
    /// query's value (`+` a space). A value with neither `%` nor `+` has no other spelling,
    /// and is searched once.
    fn echoed_in(&self, value: &HeaderValue) -> bool {
        let raw = value.as_bytes();
        if self.holds(raw) {
            return true;
        }
        if memchr::memchr2(b'%', b'+', raw).is_none() {
            return false;
        }
        value.to_str().is_ok_and(|v| {
            self.holds(crate::rules::decoded(v).as_bytes())
                || (v.contains('+')
                    && self.holds(crate::rules::decoded(&v.replace('+', " ")).as_bytes()))
        })
    }

    /// Removes the header lines (or trailer lines) of an answer from `entry` that hold one of
    /// the forms, keeping the others of the same name, and logs the names.
    pub fn strip(&self, headers: &mut HeaderMap, entry: &str) {
        if self.0.is_empty() || !headers.values().any(|v| self.echoed_in(v)) {
            return;
        }
        let mut kept = HeaderMap::with_capacity(headers.len());
        let mut names: Vec<HeaderName> = Vec::new();
        let mut current: Option<HeaderName> = None;
        for (name, value) in std::mem::take(headers) {
            if let Some(name) = name {
                current = Some(name);
            }
            let Some(name) = current.clone() else {
                continue;
            };
            if !self.echoed_in(&value) {
                kept.append(name, value);
            } else if !names.contains(&name) {
                names.push(name);
            }
        }
        *headers = kept;
        let names: Vec<&str> = names.iter().map(HeaderName::as_str).collect();
        tracing::warn!(entry, headers = ?names, "the internal system's answer echoed the entry's credentials in these header or trailer lines; they were removed before it went back");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_holding_the_credential_in_any_form_are_removed() {
        // svc:ApiPw_Kq7Zx
        let injected = "Basic c3ZjOkFwaVB3X0txN1p4";
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-echo-auth", "Basic c3ZjOkFwaVB3X0txN1p4"),
            ("link", "<http://x/>; rel=Basic_c3ZjOkFwaVB3X0txN1p4"),
            ("location", "http://h/?pw=ApiPw_Kq7Zx"),
            ("content-type", "application/json"),
            ("etag", "\"c3Zj\""),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        Echoes::of(Some(injected)).strip(&mut headers, "api");
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-type", "etag"]);
        // A bearer token, or a header of the API's own, alike.
        let mut headers = HeaderMap::new();
        headers.insert("x-debug", "token=GitTok_Mn4Vb9".parse().unwrap());
        headers.insert(
            "location",
            "http://h/?t=GitTok%2FMn4%2BVb9".parse().unwrap(),
        );
        headers.insert("x-other", "gittok_mn4vb9".parse().unwrap());
        Echoes::of(Some("Bearer GitTok_Mn4Vb9")).strip(&mut headers, "code");
        Echoes::of(Some("Bearer GitTok/Mn4+Vb9")).strip(&mut headers, "code");
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-other"], "another case is another token");
        // svc:S3cretPassw0rdLong, whose base64 ends in `==`: without its padding, and a
        // password with a space sent in a query (`+`); an innocent line of the same name stays.
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-u", "c3ZjOlMzY3JldFBhc3N3MHJkTG9uZw"),
            ("x-a", "innocent"),
            ("x-a", "Basic c3ZjOlMzY3JldFBhc3N3MHJkTG9uZw=="),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        Echoes::of(Some("Basic c3ZjOlMzY3JldFBhc3N3MHJkTG9uZw==")).strip(&mut headers, "api");
        let left: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(left, [("x-a", "innocent")]);
        use base64::Engine;
        let spaced = base64::engine::general_purpose::STANDARD.encode("svc:p@ss/w+rd=Lo ng%x");
        let mut headers = HeaderMap::new();
        headers.insert(
            "location",
            "/n?p=p%40ss%2Fw%2Brd%3DLo+ng%25x".parse().unwrap(),
        );
        Echoes::of(Some(&format!("Basic {spaced}"))).strip(&mut headers, "special");
        assert!(headers.is_empty());
        // The value and the padded token hold the unpadded token: one search finds all three.
        assert_eq!(
            Echoes::of(Some("Basic c3ZjOlMzY3JldFBhc3N3MHJkTG9uZw=="))
                .0
                .len(),
            2,
            "the unpadded token and the password"
        );
        // Forms too short to tell from chance are not looked for.
        let mut headers = HeaderMap::new();
        headers.insert("x-n", "abc".parse().unwrap());
        Echoes::of(Some("abc")).strip(&mut headers, "api");
        assert_eq!(headers.len(), 1);
    }
}
