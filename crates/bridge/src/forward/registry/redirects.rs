//! The registry's redirects (blob downloads from S3-like storage), followed by the bridge to
//! trusted hosts only, and the `Location`s it passes on, made relative to the cloud's route.

use http::{Method, Response, StatusCode, header};
use http_body_util::Empty;
use hyper::body::Incoming;
use url::Url;

use super::super::host_port;
use super::super::kind::{Refusal, Sent};
use super::super::upstream::path_under;
use super::RegistryKind;
use super::auth::Scheme;

/// Redirects followed for one request at most.
const MAX_REDIRECTS: usize = 5;

impl RegistryKind {
    /// Follows the registry's redirects (blob downloads from S3-like storage) itself, to the
    /// registry's own host or a `redirect_hosts` entry only; a redirect elsewhere is refused,
    /// so no internal URL reaches the client. The entry's login goes along to the registry's
    /// own origin (the same server, which would otherwise answer 401 and make a right login
    /// read as a wrong one), never to another host (a storage URL carries its own signature).
    /// `relogged`: the request was already sent once more after a `401`, which it may be once.
    pub(super) async fn follow_redirects(
        &self,
        sent: &Sent,
        mut response: Response<Incoming>,
        mut relogged: bool,
    ) -> Result<Response<Incoming>, Refusal> {
        let method = &sent.method;
        let mut at = sent
            .head
            .as_ref()
            .and_then(|(uri, _)| Url::parse(&uri.to_string()).ok())
            .unwrap_or_else(|| self.cfg.url.clone());
        // Whether every hop so far stayed on the registry's own origin.
        let mut own = true;
        for followed in 0..=MAX_REDIRECTS {
            if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED
            {
                return Ok(response);
            }
            if followed == MAX_REDIRECTS {
                break;
            }
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| at.join(l).ok());
            let Some(target) = location else {
                return Err(self.unavailable(
                    "registry: redirect",
                    format!(
                        "registry {:?} answered a redirect without a usable Location",
                        self.cfg.name
                    ),
                ));
            };
            let host = host_port(&target);
            let allowed = self.trusted(&target, &self.cfg.redirect_hosts);
            if !allowed || (method != Method::GET && method != Method::HEAD) {
                // The host is for the bridge's operator, in its log; the caller learns none of
                // the internal network's names.
                tracing::warn!(registry = %self.cfg.name, redirect_host = %host, "registry redirect not followed: if that is the registry's blob storage, add this host to redirect_hosts");
                return Err(self.unavailable(
                    "registry: redirect_hosts",
                    format!(
                        "registry {:?} redirected the {method} to a host that is neither its own nor in registries[].redirect_hosts; the bridge does not follow it (the bridge's log names the host)",
                        self.cfg.name
                    ),
                ));
            }
            // Only redirects the registry itself gave: a storage host that sends the request
            // back to the registry's origin chooses its path, and no login is spent there nor
            // on any hop after it.
            own &= self.own_origin(&at) && self.own_origin(&target);
            // The scope of a token is named by the path first asked for.
            let path = sent
                .head
                .as_ref()
                .map_or("/v2/", |(uri, _)| self.under_base(uri));
            let (login, seen) = match own {
                // Fetched again in case the 401 retry replaced it.
                true => {
                    let scope = super::scope_of(path, false);
                    self.authorization_under(scope).await?
                }
                false => (None, Scheme::Unknown),
            };
            response = self.hop(sent, &target, login.clone()).await?;
            // A token refused before its end, or a registry whose `/v2/` did not say it wants
            // tokens: the hop is sent once more (once per request).
            if own && !relogged && response.status() == StatusCode::UNAUTHORIZED {
                relogged = true;
                let again = self
                    .relogin_hop(method, path, (login.as_ref(), &seen), &response)
                    .await?;
                if let Some(again) = again {
                    response = self.hop(sent, &target, Some(again)).await?;
                }
            }
            at = target;
        }
        Err(self.unavailable(
            "registry: redirect",
            format!(
                "registry {:?} redirected more than {MAX_REDIRECTS} times",
                self.cfg.name
            ),
        ))
    }

    /// One redirect followed: `sent`'s method to `target`, with what its answer depends on (a
    /// resumed pull's range, the formats asked) and `login`.
    async fn hop(
        &self,
        sent: &Sent,
        target: &Url,
        login: Option<http::HeaderValue>,
    ) -> Result<Response<Incoming>, Refusal> {
        let mut req = http::Request::builder()
            .method(sent.method.clone())
            .uri(target.as_str())
            .body(Empty::new())
            .map_err(|e| self.unavailable("registry: redirect", e.to_string()))?;
        if let Some((_, headers)) = &sent.head {
            for name in [header::RANGE, header::ACCEPT, header::IF_NONE_MATCH] {
                for value in headers.get_all(&name) {
                    req.headers_mut().append(name.clone(), value.clone());
                }
            }
        }
        if let Some(login) = login {
            req.headers_mut().insert(header::AUTHORIZATION, login);
        }
        let host = host_port(target);
        self.client.request(req).await.map_err(|e| {
            tracing::warn!(registry = %self.cfg.name, redirect_host = %host, cause = %e, "redirect target unreachable");
            self.unavailable(
                "registry: redirect",
                format!(
                    "the bridge cannot reach the address registry {:?} redirected to (the bridge's log says which and why)",
                    self.cfg.name
                ),
            )
        })
    }

    /// Whether `url` is on the registry's own scheme, host and port.
    fn own_origin(&self, url: &Url) -> bool {
        url.scheme() == self.cfg.url.scheme() && host_port(url) == host_port(&self.cfg.url)
    }

    /// Whether the bridge may send a request to `url`, which a registry answer named: on the
    /// registry's own scheme, host and port, or on a host of `listed` (a bare host meaning the
    /// default port of the registry's scheme) over https, or over the registry's own scheme.
    pub(super) fn trusted(&self, url: &Url, listed: &[String]) -> bool {
        let own = &self.cfg.url;
        let same_scheme = url.scheme() == own.scheme() || url.scheme() == "https";
        if !same_scheme {
            return false;
        }
        let host = host_port(url);
        if host == host_port(own) {
            return true;
        }
        let default_port = own.port_or_known_default().unwrap_or(443);
        listed.iter().any(|entry| {
            Url::parse(&format!("{}://{entry}/", own.scheme())).is_ok_and(|u| {
                let port = u.port().unwrap_or(default_port);
                format!("{}:{port}", u.host_str().unwrap_or_default()) == host
            })
        })
    }

    /// A `Location` as the cloud can prefix it: `/v2/…` on the registry's own origin (absolute
    /// or not, under the entry's base path), one relative to the request as it is, or `None`
    /// for one that names another origin.
    pub(super) fn relative(&self, location: &str) -> Option<String> {
        if !location.starts_with('/') && Url::parse(location).is_err() {
            return Some(location.to_string());
        }
        if let Some(path) = path_under(&self.cfg.url, location) {
            return Some(path);
        }
        // On the registry's own origin but outside the entry's base path (a registry mounted
        // under a path that names its `/v2/…` URLs from the root): the path as it is.
        let url = self.cfg.url.join(location).ok()?;
        let own =
            url.scheme() == self.cfg.url.scheme() && host_port(&url) == host_port(&self.cfg.url);
        own.then(|| match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::registry;
    use super::*;

    #[test]
    fn answers_may_name_only_the_registry_or_listed_hosts() {
        let mut cfg = registry().cfg;
        cfg.url = "https://reg.internal/artifactory/api/docker/repo"
            .parse()
            .unwrap();
        let r = RegistryKind::new(cfg);
        let url = |s: &str| Url::parse(s).unwrap();
        let listed = ["auth.internal".to_string(), "s3.internal:9000".to_string()];
        assert!(r.trusted(&url("https://reg.internal:443/token"), &[]));
        assert!(r.trusted(&url("https://auth.internal/token"), &listed));
        assert!(r.trusted(&url("https://s3.internal:9000/b"), &listed));
        // Not over plain HTTP, not on another port, not an unlisted host.
        assert!(!r.trusted(&url("http://reg.internal:443/token"), &[]));
        assert!(!r.trusted(&url("https://auth.internal:8443/token"), &listed));
        assert!(!r.trusted(&url("https://evil.example/token"), &listed));
        // Locations on the registry's origin lose it and the entry's base path.
        assert_eq!(
            r.relative(
                "https://REG.internal:443/artifactory/api/docker/repo/v2/a/blobs/uploads/u?_state=x"
            )
            .as_deref(),
            Some("/v2/a/blobs/uploads/u?_state=x")
        );
        assert_eq!(
            r.relative("/artifactory/api/docker/repo/v2/a").as_deref(),
            Some("/v2/a")
        );
        assert_eq!(r.relative("https://other.internal/v2/a"), None);
        assert_eq!(r.relative("u?_state=x").as_deref(), Some("u?_state=x"));
        // The registry's own origin, outside the base path: the whole path.
        assert_eq!(
            r.relative("https://reg.internal/v2/a/blobs/uploads/u")
                .as_deref(),
            Some("/v2/a/blobs/uploads/u")
        );
    }
}
