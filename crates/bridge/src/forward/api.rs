//! `apis` entries: every method and path unless `allow` rules are given; HTTP Basic
//! credentials injected.

use http::{HeaderMap, HeaderValue, Method, header};
use url::Url;

use super::kind::{Kind, Refusal};
use crate::config::{Api, basic_authorization};
use crate::rules::allowed;

impl Kind for Api {
    fn max_connections(&self) -> Option<u32> {
        self.max_connections
    }

    fn base_url(&self) -> &Url {
        &self.url
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
        if let Some(auth) = &self.auth
            && let Ok(v) =
                HeaderValue::from_str(&basic_authorization(&auth.username, &auth.password))
        {
            headers.insert(header::AUTHORIZATION, v);
        }
    }
}
