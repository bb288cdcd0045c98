//! `apis` entries: every method and path unless `allow` rules are given; the entry's
//! credentials (Basic, Bearer or a header of the API's own) injected; a redirect to the API's
//! own address comes back as the tunnel's path, which the cloud turns into its own.

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use url::Url;

use super::kind::{Kind, Refusal};
use super::upstream::path_under;
use crate::config::Api;
use crate::rules::allowed;

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
        // Rules name methods: a `_method` parameter (Rails, Laravel, Symfony read it) would
        // make the internal system run another method than the one they checked.
        let overrides = |q: &str| {
            url::form_urlencoded::parse(q.as_bytes())
                .any(|(k, _)| k.eq_ignore_ascii_case("_method"))
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

    fn response_filter(&self, _status: StatusCode, headers: &mut HeaderMap) -> Option<Refusal> {
        let location = headers.get(header::LOCATION)?.to_str().ok()?;
        let tunnel_path = format!("/apis/{}{}", self.name, path_under(&self.url, location)?);
        if let Ok(value) = HeaderValue::from_str(&tunnel_path) {
            headers.insert(header::LOCATION, value);
        }
        None
    }

    fn upstream_request_filter(&self, headers: &mut HeaderMap) {
        if let Some(auth) = &self.auth {
            let (name, value) = auth.header();
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
    }
}
