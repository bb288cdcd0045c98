//! A registry's authentication: the challenge of its `/v2/`, learnt once (again when an answer
//! says it changed), and the tokens of the Docker token flow, fetched per scope and cached
//! until they expire.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use url::Url;

use super::super::host_port;
use super::super::kind::Refusal;
use super::{RegistryKind, is_pull, scope_of};

/// How long a token or challenge request may take.
pub(super) const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// A token's life when its service does not say (the Docker token spec's default).
const DEFAULT_TOKEN_LIFE: Duration = Duration::from_secs(60);
/// The rule of a refusal to send the login to an untrusted token service; `bridge check`
/// names that service, which the caller's message keeps to the bridge's log.
pub(super) const TOKEN_HOSTS_RULE: &str = "registry: token_hosts";
/// How the caller's message points at the log for the host it does not name.
pub(super) const HOST_IN_LOG: &str = " (the bridge's log names the host)";
/// The largest token answer read.
const MAX_TOKEN_ANSWER: usize = 64 * 1024;

/// How the registry wants to be authenticated, learnt from its `/v2/` challenge (or, when `/v2/`
/// says nothing, from a `401` on the registry's own redirects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scheme {
    /// No answer yet.
    Unknown,
    /// `/v2/` answered without asking.
    Open,
    /// `WWW-Authenticate: Basic …`.
    Basic,
    /// `WWW-Authenticate: Bearer realm=…,service=…`.
    Bearer { realm: Url, service: Option<String> },
}

/// The challenge learnt and the tokens fetched, by scope. Never locked across network I/O: a
/// slow registry or token service delays only the requests that wait for it.
pub(super) struct AuthState {
    pub(super) scheme: Scheme,
    /// The scheme is a token flow learnt from a `401` on the registry's own redirects, its
    /// `/v2/` having given no challenge: a later challenge there may change it back.
    pub(super) learnt_on_redirect: bool,
    pub(super) tokens: HashMap<String, (HeaderValue, Instant)>,
    /// Why the registry could not be reached last, in full: for `bridge check` and the log,
    /// never for callers (the words can name internal hosts).
    pub(super) unreachable: Option<String>,
}

/// Tokens kept at most: scopes come from callers' paths, so the cache must not grow with them.
const MAX_TOKENS: usize = 1024;
/// The longest a token is kept, whatever its service says.
const MAX_TOKEN_LIFE: Duration = Duration::from_secs(24 * 3600);

impl RegistryKind {
    /// `GET /v2/` without credentials: the registry's challenge, or `Unknown` when its answer
    /// (neither 200 nor 401: a load balancer's 503 while it starts) says nothing yet.
    async fn learn_scheme(&self) -> Result<Scheme, Refusal> {
        let req = http::Request::get(self.url("/v2/"))
            .body(Empty::new())
            .map_err(|e| self.unavailable("registry: challenge", e.to_string()))?;
        let answer = tokio::time::timeout(AUTH_TIMEOUT, self.client.request(req)).await;
        let response = match answer {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                let cause = crate::forward::causes(&e);
                tracing::warn!(registry = %self.cfg.name, target = %host_port(&self.cfg.url), cause = %cause, "registry unreachable");
                let check = crate::forward::caller_advice(&cause);
                let name = &self.cfg.name;
                // `bridge check` adds its own hint to these words.
                self.state().unreachable = Some(format!(
                    "the bridge cannot reach registry {name:?}: {cause}"
                ));
                return Err(self.unavailable(
                    "registry: challenge",
                    format!(
                        "the bridge cannot reach registry {name:?}: {} (the bridge's log says more). {check}",
                        crate::forward::caller_summary(&cause)
                    ),
                ));
            }
            Err(_) => {
                return Err(self.unavailable(
                    "registry: challenge",
                    format!(
                        "registry {:?} did not answer GET /v2/ within {AUTH_TIMEOUT:?}",
                        self.cfg.name
                    ),
                ));
            }
        };
        if response.status().is_success() {
            return Ok(Scheme::Open);
        }
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(Scheme::Unknown);
        }
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        Ok(parse_challenge(challenge).unwrap_or(Scheme::Basic))
    }

    /// A token for `scope` from `realm`, asked with the entry's login.
    pub(super) async fn fetch_token(
        &self,
        realm: &Url,
        service: Option<&str>,
        scope: Option<&str>,
    ) -> Result<(HeaderValue, Instant), Refusal> {
        let realm_host = host_port(realm);
        if !self.trusted(realm, &self.cfg.token_hosts) {
            // The host is for the bridge's operator, in its log; the caller learns none of the
            // internal network's names.
            // An https registry's token service must be https too; an http one's may be either.
            let https_note = match self.cfg.url.scheme() {
                "https" => " (or not over https)",
                _ => "",
            };
            tracing::warn!(registry = %self.cfg.name, token_host = %realm_host, "token service not trusted: if it is the registry's, add this host to token_hosts{https_note}");
            return Err(self.login_refused(
                TOKEN_HOSTS_RULE,
                format!(
                    "registry {:?} sends its token requests to a service that is neither at its own host and port nor in registries[].token_hosts{https_note}; the bridge does not send the login there: its operator can add that host to token_hosts{HOST_IN_LOG}",
                    self.cfg.name
                ),
            ));
        }
        let mut url = realm.clone();
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            for scope in scope.into_iter().flat_map(|s| s.split(' ')) {
                query.append_pair("scope", scope);
            }
        }
        let mut req = http::Request::get(url.as_str())
            .body(Empty::new())
            .map_err(|e| self.unavailable("registry: token", e.to_string()))?;
        if let Some(basic) = self.basic() {
            req.headers_mut().insert(header::AUTHORIZATION, basic);
        }
        let failed = |why: String| {
            tracing::warn!(registry = %self.cfg.name, token_host = %realm_host, why = %why, "token request failed");
            // Only a refusal is the login's fault; a service that is down or silent is not.
            if why.starts_with("refused") {
                return self.login_refused(
                    "registry: token",
                    format!(
                        "the token service of registry {:?} {why}; the bridge's operator must fix registries[].auth{HOST_IN_LOG}",
                        self.cfg.name
                    ),
                );
            }
            self.unavailable(
                "registry: token",
                format!(
                    "the token service of registry {:?} {why}; retry later; if it lasts, the bridge's operator must check that the bridge reaches the token service{HOST_IN_LOG}",
                    self.cfg.name
                ),
            )
        };
        let answer = tokio::time::timeout(AUTH_TIMEOUT, async {
            let response = self.client.request(req).await.map_err(|e| {
                tracing::warn!(registry = %self.cfg.name, token_host = %realm_host, cause = %e, "token service unreachable");
                "cannot be reached".to_string()
            })?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                return Err(format!("refused the login (HTTP {})", status.as_u16()));
            }
            if !status.is_success() {
                return Err(format!("answered HTTP {}", status.as_u16()));
            }
            http_body_util::Limited::new(response.into_body(), MAX_TOKEN_ANSWER)
                .collect()
                .await
                .map(|body| body.to_bytes())
                .map_err(|e| format!("sent an unreadable answer: {e}"))
        })
        .await;
        let body = match answer {
            Ok(Ok(body)) => body,
            Ok(Err(why)) => return Err(failed(why)),
            Err(_) => return Err(failed(format!("did not answer within {AUTH_TIMEOUT:?}"))),
        };
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("did not answer JSON: {e}")))?;
        let token = answer["token"]
            .as_str()
            .or(answer["access_token"].as_str())
            .ok_or_else(|| failed("answered without a token".to_string()))?;
        let life = answer["expires_in"]
            .as_u64()
            .map_or(DEFAULT_TOKEN_LIFE, Duration::from_secs)
            .min(MAX_TOKEN_LIFE);
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| failed("answered a token that is not a header value".to_string()))?;
        // Renewed a little early: a token must not expire between here and the registry.
        Ok((value, Instant::now() + life.mul_f64(0.9)))
    }

    /// The path of `uri` under the entry's URL (a registry may sit under a base path, as
    /// Artifactory's do): the path a token's scope is named by.
    pub(super) fn under_base<'u>(&self, uri: &'u http::Uri) -> &'u str {
        let base = self.cfg.url.path().trim_end_matches('/');
        uri.path().strip_prefix(base).unwrap_or(uri.path())
    }

    pub(super) async fn authorization(
        &self,
        method: &Method,
        path: &str,
    ) -> Result<Option<HeaderValue>, Refusal> {
        let scope = scope_of(path, !is_pull(method));
        Ok(self.authorization_under(scope).await?.0)
    }

    /// The `Authorization` for a request needing `scope` (scopes separated by spaces).
    pub(super) async fn authorization_for(
        &self,
        scope: Option<String>,
    ) -> Result<Option<HeaderValue>, Refusal> {
        Ok(self.authorization_under(scope).await?.0)
    }

    /// [`Self::authorization_for`], with the scheme it was chosen under: a `401` to it is read
    /// against that scheme, which another request may have changed meanwhile.
    pub(super) async fn authorization_under(
        &self,
        scope: Option<String>,
    ) -> Result<(Option<HeaderValue>, Scheme), Refusal> {
        let mut scheme = self.state().scheme.clone();
        if scheme == Scheme::Unknown {
            scheme = self.learn_scheme().await?;
            if scheme != Scheme::Unknown {
                let mut state = self.state();
                state.scheme = scheme.clone();
                state.learnt_on_redirect = false;
            }
        }
        let (realm, service) = match &scheme {
            Scheme::Open => return Ok((None, scheme)),
            // Not learnt yet (the registry answered neither 200 nor 401): the login, if any.
            Scheme::Unknown | Scheme::Basic => return Ok((self.basic(), scheme)),
            Scheme::Bearer { realm, service } => (realm, service),
        };
        let key = scope.clone().unwrap_or_default();
        if let Some((token, until)) = self.state().tokens.get(&key)
            && Instant::now() < *until
        {
            return Ok((Some(token.clone()), scheme));
        }
        let (token, until) = self
            .fetch_token(realm, service.as_deref(), scope.as_deref())
            .await?;
        self.keep_token(key, token.clone(), until);
        Ok((Some(token), scheme))
    }

    /// Caches a token for its scope, `key`.
    pub(super) fn keep_token(&self, key: String, token: HeaderValue, until: Instant) {
        let mut state = self.state();
        let now = Instant::now();
        state.tokens.retain(|_, (_, until)| now < *until);
        if state.tokens.len() >= MAX_TOKENS {
            state.tokens.clear();
        }
        state.tokens.insert(key, (token, until));
    }
}

/// The scheme a `WWW-Authenticate` value asks for; `None` when it is neither Basic nor a
/// usable Bearer challenge.
pub(super) fn parse_challenge(value: &str) -> Option<Scheme> {
    let (scheme, params) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Scheme::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    for (key, value) in challenge_params(params) {
        match key.to_ascii_lowercase().as_str() {
            "realm" => realm = Url::parse(&value).ok(),
            "service" => service = Some(value),
            _ => {}
        }
    }
    Some(Scheme::Bearer {
        realm: realm?,
        service,
    })
}

/// `key="value",key=value` pairs of a challenge (quoted values may hold commas).
fn challenge_params(params: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = params.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        pairs.push((key, value.to_string()));
        rest = tail.trim_start().trim_start_matches(',');
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_and_scopes() {
        assert_eq!(parse_challenge("Basic realm=\"r\""), Some(Scheme::Basic));
        assert_eq!(
            parse_challenge(
                "Bearer realm=\"https://auth.internal/token\",service=\"reg, main\",scope=\"x\""
            ),
            Some(Scheme::Bearer {
                realm: "https://auth.internal/token".parse().unwrap(),
                service: Some("reg, main".into()),
            })
        );
        assert_eq!(parse_challenge("Bearer service=\"x\""), None);
        assert_eq!(parse_challenge("Negotiate"), None);
        assert_eq!(
            scope_of("/v2/team/app/manifests/1.0", false).as_deref(),
            Some("repository:team/app:pull")
        );
        assert_eq!(
            scope_of("/v2/a/b/c/blobs/uploads/", true).as_deref(),
            Some("repository:a/b/c:pull,push")
        );
        assert_eq!(
            scope_of("/v2/_catalog", false).as_deref(),
            Some("registry:catalog:*")
        );
        assert_eq!(scope_of("/v2/", false), None);
        assert_eq!(
            scope_of("/v2/team/tags/app/manifests/1.0", false).as_deref(),
            Some("repository:team/tags/app:pull"),
            "a repository with a component named like a marker"
        );
        assert_eq!(
            scope_of("/v2/team/app/referrers/sha256:abc", false).as_deref(),
            Some("repository:team/app:pull"),
            "OCI 1.1 referrers (cosign, oras)"
        );
    }
}
