//! An internal system that writes the request's headers back into its answer's headers (a
//! debugging endpoint, a redirect that carries them in its query) would hand the credentials
//! the bridge injected to the caller. Before an answer goes back, every header holding the
//! injected credential, whole or in part, is removed, and the operator is told which.
//! A body cannot be checked without holding it whole: docs/bridge.md says so.

use http::{HeaderMap, HeaderName};

/// Shorter forms are not looked for: they would turn up in unrelated values by chance.
const SHORTEST: usize = 8;

/// The forms of an entry's injected credentials to look for in its answers' headers, made once
/// when the bridge starts.
pub struct Echoes(Vec<String>);

impl Echoes {
    /// The forms of `injected` (the credentials' header value as the bridge sends it) worth
    /// looking for: the value, what follows its scheme word (`Basic`, `Bearer`), and for
    /// `Basic` the password it encodes. None for an entry without credentials.
    pub fn of(injected: Option<&str>) -> Echoes {
        use base64::Engine;
        let Some(injected) = injected else {
            return Echoes(Vec::new());
        };
        let mut forms = vec![injected.to_string()];
        if let Some((scheme, rest)) = injected.split_once(' ') {
            forms.push(rest.to_string());
            if scheme.eq_ignore_ascii_case("basic")
                && let Ok(pair) = base64::engine::general_purpose::STANDARD.decode(rest)
                && let Ok(pair) = String::from_utf8(pair)
                && let Some((_, password)) = pair.split_once(':')
            {
                forms.push(password.to_string());
            }
        }
        forms.retain(|f| f.len() >= SHORTEST);
        Echoes(forms)
    }

    /// Removes the headers of an answer from `entry` that hold one of the forms, as sent or
    /// percent-decoded (a redirect's query), and logs their names.
    pub fn strip(&self, headers: &mut HeaderMap, entry: &str) {
        if self.0.is_empty() {
            return;
        }
        let holds = |value: &[u8]| {
            self.0
                .iter()
                .any(|f| value.windows(f.len()).any(|w| w == f.as_bytes()))
        };
        let echoes = |value: &http::HeaderValue| {
            holds(value.as_bytes())
                || value
                    .to_str()
                    .is_ok_and(|v| holds(crate::rules::decoded(v).as_bytes()))
        };
        let echoed: Vec<HeaderName> = headers
            .iter()
            .filter(|(_, v)| echoes(v))
            .map(|(name, _)| name.clone())
            .collect();
        if echoed.is_empty() {
            return;
        }
        let names: Vec<&str> = echoed.iter().map(HeaderName::as_str).collect();
        tracing::warn!(entry, headers = ?names, "the internal system's answer echoed the entry's credentials in these headers; they were removed before it went back");
        for name in echoed {
            headers.remove(name);
        }
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
        // Forms too short to tell from chance are not looked for.
        let mut headers = HeaderMap::new();
        headers.insert("x-n", "abc".parse().unwrap());
        Echoes::of(Some("abc")).strip(&mut headers, "api");
        assert_eq!(headers.len(), 1);
    }
}
