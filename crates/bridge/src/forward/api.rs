//! `apis` entries: every method and path unless `allow` rules are given; the entry's
//! credentials (Basic, Bearer or a header of the API's own) injected; a redirect to the API's
//! own address comes back as the tunnel's path, which the cloud turns into its own.

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use url::Url;

use super::kind::{Kind, Refusal};
use super::upstream::path_under;
use crate::config::Api;
use crate::rules::allowed;

/// Whether a query parameter's name reads as `_method` where PHP reads it: cut at a NUL,
/// leading spaces dropped, `.` and ` ` turned into `_` (so `.method` is `_method`), and
/// `_method[…]` an array of that name. Letters' case is ignored (more is refused than PHP
/// would read, never less).
fn names_method_override(name: &str) -> bool {
    let name = name.split('\0').next().unwrap_or_default();
    let base = name
        .trim_start_matches(' ')
        .split('[')
        .next()
        .unwrap_or_default();
    let php: String = base
        .chars()
        .map(|c| if matches!(c, '.' | ' ') { '_' } else { c })
        .collect();
    php.eq_ignore_ascii_case("_method")
}

impl Kind for Api {
    fn max_connections(&self) -> Option<u32> {
        self.max_connections
    }

    fn base_url(&self) -> &Url {
        &self.url
    }

    fn tls_ca_file(&self) -> Option<&std::path::Path> {
        self.tls_ca_file.as_deref()
    }

    fn admit(&self, method: &Method, path: &str, query: Option<&str>) -> Result<String, Refusal> {
        // Rules name methods: a `_method` parameter (Laravel and Symfony read it from the
        // query) would make the internal system run another method than the one they checked.
        let overrides = |q: &str| {
            url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| names_method_override(&k))
        };
        if !self.allow.is_empty() && query.is_some_and(overrides) {
            return Err(Refusal::forbidden(
                "method override",
                format!(
                    "{method} {path} has a _method query parameter, which would make the internal system see another method than the allow rules of the bridge's apis entry {:?} checked; send the request with its own method",
                    self.name
                ),
            ));
        }
        allowed(&self.allow, method.as_str(), path).ok_or_else(|| {
            Refusal::forbidden(
                "no matching allow rule",
                format!(
                    "{method} {path} matches no allow rule of the bridge's apis entry {:?}; the bridge's operator can add one",
                    self.name
                ),
            )
        })
    }

    fn injected(&self) -> Option<String> {
        self.auth.as_ref().map(|auth| auth.header().1)
    }

    fn response_filter(&self, _status: StatusCode, headers: &mut HeaderMap) -> Option<Refusal> {
        let location = headers.get(header::LOCATION)?.to_str().ok()?;
        // The fragment is the browser's (a place in the page): kept, as the server wrote it.
        let fragment = location.split_once('#').map_or("", |(_, f)| f);
        let mut tunnel_path = format!("/apis/{}{}", self.name, path_under(&self.url, location)?);
        if !fragment.is_empty() {
            tunnel_path = format!("{tunnel_path}#{fragment}");
        }
        if let Ok(value) = HeaderValue::from_str(&tunnel_path) {
            headers.insert(header::LOCATION, value);
        }
        None
    }

    fn upstream_request_filter(&self, headers: &mut HeaderMap) {
        if let Some(auth) = &self.auth {
            let (name, value) = auth.header();
            // Every spelling of the injected header goes first: CGI, WSGI and Rack servers
            // read `X_API_Key` as `X-API-Key` and would join a caller's value to the bridge's.
            let wanted = name.as_str().replace('_', "-");
            let spellings: Vec<HeaderName> = headers
                .keys()
                .filter(|k| tunnel::hop::is_named(k, &[wanted.as_str()]))
                .cloned()
                .collect();
            for spelling in spellings {
                headers.remove(spelling);
            }
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names_method_override;

    #[test]
    fn method_overrides_are_read_as_php_reads_them() {
        for name in [
            "_method",
            "_METHOD",
            ".method",
            " .method",
            "_method[]",
            "_method[x]",
            "_method\0x",
        ] {
            assert!(names_method_override(name), "{name:?}");
        }
        for name in ["method", "_methods", "x_method", "_meth", "_method_x"] {
            assert!(!names_method_override(name), "{name:?}");
        }
    }
}
