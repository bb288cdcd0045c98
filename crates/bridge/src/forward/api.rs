//! `apis` entries: every method and path unless `allow` rules are given; the entry's
//! credentials (Basic, Bearer or a header of the API's own) injected.

use http::{HeaderMap, HeaderValue, Method};
use url::Url;

use super::kind::{Kind, Refusal};
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

    fn admit(&self, method: &Method, path: &str, _query: Option<&str>) -> Result<String, Refusal> {
        allowed(&self.allow, method.as_str(), path).ok_or_else(|| {
            Refusal::forbidden(
                "no matching allow rule",
                "no allow rule of this resource matches the method and path",
            )
        })
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
