//! `apis` entries: every method and path unless `allow` rules are given; the entry's
//! credentials (Basic, Bearer or a header of the API's own) injected; a redirect to the API's
//! own address comes back as the tunnel's path, which the cloud turns into its own.

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
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

    fn response_filter(&self, _status: StatusCode, headers: &mut HeaderMap) -> Option<Refusal> {
        let location = headers.get(header::LOCATION)?.to_str().ok()?;
        let tunnel_path = tunnel_location(&self.url, &self.name, location)?;
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

/// A `Location` on the API's own origin and under its base path, as the tunnel's path
/// (`/apis/{name}/…`), which the cloud prefixes with `/v1/bridges/{bridge}`: the caller
/// follows it through the cloud, and the internal address never reaches it. `None` for
/// one elsewhere (another host, or outside the base path) and for a relative path, which
/// pass as they are.
fn tunnel_location(base: &Url, name: &str, location: &str) -> Option<String> {
    // A relative path (`items/7`) is relative to the request, and right through the cloud.
    let url = match Url::parse(location) {
        Ok(absolute) => absolute,
        Err(_) if location.starts_with('/') => base.join(location).ok()?,
        Err(_) => return None,
    };
    let origin = |u: &Url| {
        (
            u.scheme().to_string(),
            u.host_str().map(str::to_string),
            u.port_or_known_default(),
        )
    };
    if origin(&url) != origin(base) {
        return None;
    }
    let prefix = base.path().trim_end_matches('/');
    let rest = url.path().strip_prefix(prefix)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let query = url.query().map(|q| format!("?{q}")).unwrap_or_default();
    Some(format!("/apis/{name}{rest}{query}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_on_the_api_become_tunnel_paths_and_others_pass() {
        let base: Url = "http://api.internal:8080/v1".parse().unwrap();
        let at = |l| tunnel_location(&base, "orders", l);
        assert_eq!(
            at("http://API.internal:8080/v1/items/7?x=1").as_deref(),
            Some("/apis/orders/items/7?x=1")
        );
        assert_eq!(at("/v1/items").as_deref(), Some("/apis/orders/items"));
        assert_eq!(at("items"), None);
        assert_eq!(at("/v1").as_deref(), Some("/apis/orders"));
        // Elsewhere: another host or port, another scheme, outside the base path.
        assert_eq!(at("http://sso.internal/login"), None);
        assert_eq!(at("http://api.internal:9090/v1/items"), None);
        assert_eq!(at("https://api.internal:8080/v1/items"), None);
        assert_eq!(at("/v1x/items"), None);
        assert_eq!(at("/login"), None);
    }
}
