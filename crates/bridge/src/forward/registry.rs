//! `registries` (OCI distribution API): pulls pass, `GET` and `HEAD` under `/v2/`, checked here
//! before anything reaches the registry. The entry's login answers the registry's challenge,
//! learnt once from an unauthenticated `GET /v2/` as registry clients do:
//! - `Basic` (Distribution with htpasswd, Nexus, Artifactory): sent with every request;
//! - `Bearer` (the Docker token flow: Harbor, GitLab, Quay, Distribution with token auth): the
//!   bridge asks the challenge's `realm` for a token for the request's scope, with the login as
//!   Basic, caches it until it expires, and sends it. A realm on another host than the
//!   registry's is used only when the entry lists it in `token_hosts`.
//!
//! Refusals are OCI error bodies (`{"errors":[{"code":"DENIED",…}]}`), which registry clients
//! print to their user.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use url::Url;

use super::kind::{Authorize, Follow, Kind, Refusal, Sent};
use crate::config::{Registry, basic_authorization};
use crate::rules::allowed;

/// How long a token or challenge request may take.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// A token's life when its service does not say (the Docker token spec's default).
const DEFAULT_TOKEN_LIFE: Duration = Duration::from_secs(60);
/// The largest token answer read.
const MAX_TOKEN_ANSWER: usize = 64 * 1024;
/// Redirects followed for one request at most.
const MAX_REDIRECTS: usize = 5;

/// How the registry wants to be authenticated, learnt from its `/v2/` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scheme {
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
struct AuthState {
    scheme: Scheme,
    tokens: HashMap<String, (HeaderValue, Instant)>,
}

/// Tokens kept at most: scopes come from callers' paths, so the cache must not grow with them.
const MAX_TOKENS: usize = 1024;
/// The longest a token is kept, whatever its service says.
const MAX_TOKEN_LIFE: Duration = Duration::from_secs(24 * 3600);

/// A `registries` entry at work: its configuration, and what it learnt of the registry's
/// authentication.
pub(super) struct RegistryKind {
    cfg: Registry,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
    auth: std::sync::Mutex<AuthState>,
}

impl RegistryKind {
    /// The entry `cfg`, with nothing learnt yet.
    pub(super) fn new(cfg: Registry) -> Self {
        RegistryKind {
            cfg,
            client: Client::builder(TokioExecutor::new()).build(super::https_connector(None)),
            auth: std::sync::Mutex::new(AuthState {
                scheme: Scheme::Unknown,
                tokens: HashMap::new(),
            }),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.url.as_str().trim_end_matches('/'))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AuthState> {
        self.auth.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn basic(&self) -> Option<HeaderValue> {
        let login = self.cfg.auth.as_ref()?;
        HeaderValue::from_str(&basic_authorization(&login.username, &login.password)).ok()
    }

    fn unavailable(&self, rule: &str, why: String) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: "upstream_auth",
            rule: rule.to_string(),
            why,
        }
    }

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
                tracing::warn!(registry = %self.cfg.name, cause = %e, "registry unreachable");
                return Err(self.unavailable(
                    "registry: challenge",
                    format!(
                        "the bridge cannot reach registry {:?} (the bridge's log says why). Check that the bridge host can connect to it",
                        self.cfg.name
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
    async fn fetch_token(
        &self,
        realm: &Url,
        service: Option<&str>,
        scope: Option<&str>,
    ) -> Result<(HeaderValue, Instant), Refusal> {
        let realm_host = host_port(realm);
        if !self.trusted(realm, &self.cfg.token_hosts) {
            // The host is for the bridge's operator, in its log; the caller learns none of the
            // internal network's names.
            tracing::warn!(registry = %self.cfg.name, token_host = %realm_host, "token service not trusted: if it is the registry's, add this host to token_hosts (and serve it over https)");
            return Err(self.unavailable(
                "registry: token_hosts",
                format!(
                    "registry {:?} sends its token requests to a service that is neither on its own host nor in registries[].token_hosts (or not over https); the bridge does not send the login there (the bridge's log names the host)",
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
            self.unavailable(
                "registry: token",
                format!(
                    "the token service of registry {:?} {why}; the bridge's operator must fix registries[].auth (the bridge's log names the service)",
                    self.cfg.name
                ),
            )
        };
        let answer = tokio::time::timeout(AUTH_TIMEOUT, async {
            let response = self.client.request(req).await.map_err(|e| {
                tracing::warn!(registry = %self.cfg.name, cause = %e, "token service unreachable");
                "cannot be reached".to_string()
            })?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("refused the login (HTTP {})", status.as_u16()));
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

    /// A token refused (`401` to a `GET` or `HEAD` that carried one: it expired early, or the
    /// registry restarted with new keys) is dropped, and the request sent once more with a new
    /// one.
    async fn retry_unauthorized(
        &self,
        sent: &Sent,
        response: Response<Incoming>,
    ) -> Result<Response<Incoming>, Refusal> {
        let Some((uri, headers)) = &sent.head else {
            return Ok(response);
        };
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let had_token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Bearer "));
        let path = uri.path();
        if !had_token {
            // The registry wants what the bridge did not send: learn its challenge again at the
            // next request (this one's 401 becomes the 502 that names registries[].auth).
            self.state().scheme = Scheme::Unknown;
            return Ok(response);
        }
        {
            let mut state = self.state();
            state
                .tokens
                .remove(&scope_of(path, false).unwrap_or_default());
            state
                .tokens
                .remove(&scope_of(path, true).unwrap_or_default());
        }
        let pulling = sent.method == Method::GET || sent.method == Method::HEAD;
        if !pulling {
            return Ok(response);
        }
        let authorization = self.authorization(&sent.method, path).await?;
        let mut again = http::Request::builder()
            .method(sent.method.clone())
            .uri(uri.clone())
            .body(Empty::new())
            .map_err(|e| self.unavailable("registry: token", e.to_string()))?;
        *again.headers_mut() = headers.clone();
        again.headers_mut().remove(header::CONTENT_LENGTH);
        again.headers_mut().remove(header::TRANSFER_ENCODING);
        match authorization {
            Some(value) => again.headers_mut().insert(header::AUTHORIZATION, value),
            None => again.headers_mut().remove(header::AUTHORIZATION),
        };
        let failed = || {
            self.unavailable(
                "registry: token",
                format!(
                    "registry {:?} did not answer the request sent again with a new token",
                    self.cfg.name
                ),
            )
        };
        match tokio::time::timeout(AUTH_TIMEOUT, self.client.request(again)).await {
            Ok(Ok(response)) => Ok(response),
            _ => Err(failed()),
        }
    }

    /// Follows the registry's redirects (blob downloads from S3-like storage) itself, to the
    /// registry's own host or a `redirect_hosts` entry only, and without the entry's login (a
    /// storage URL carries its own signature); a redirect elsewhere is refused, so no internal
    /// URL reaches the client.
    async fn follow_redirects(
        &self,
        sent: &Sent,
        mut response: Response<Incoming>,
    ) -> Result<Response<Incoming>, Refusal> {
        let method = &sent.method;
        let mut at = sent
            .head
            .as_ref()
            .and_then(|(uri, _)| Url::parse(&uri.to_string()).ok())
            .unwrap_or_else(|| self.cfg.url.clone());
        for _ in 0..MAX_REDIRECTS {
            if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED
            {
                return Ok(response);
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
            let mut req = http::Request::builder()
                .method(method.clone())
                .uri(target.as_str())
                .body(Empty::new())
                .map_err(|e| self.unavailable("registry: redirect", e.to_string()))?;
            // What the answer depends on goes along: a resumed pull's range, the formats asked.
            if let Some((_, headers)) = &sent.head {
                for name in [header::RANGE, header::ACCEPT, header::IF_NONE_MATCH] {
                    for value in headers.get_all(&name) {
                        req.headers_mut().append(name.clone(), value.clone());
                    }
                }
            }
            response = self.client.request(req).await.map_err(|e| {
                tracing::warn!(registry = %self.cfg.name, redirect_host = %host, cause = %e, "redirect target unreachable");
                self.unavailable(
                    "registry: redirect",
                    format!(
                        "the bridge cannot reach the storage registry {:?} redirected to (the bridge's log says which and why)",
                        self.cfg.name
                    ),
                )
            })?;
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

    async fn authorization(
        &self,
        method: &Method,
        path: &str,
    ) -> Result<Option<HeaderValue>, Refusal> {
        self.authorization_for(scope_of(path, !is_pull(method)))
            .await
    }

    /// The `Authorization` for a request needing `scope` (scopes separated by spaces).
    async fn authorization_for(
        &self,
        scope: Option<String>,
    ) -> Result<Option<HeaderValue>, Refusal> {
        let mut scheme = self.state().scheme.clone();
        if scheme == Scheme::Unknown {
            scheme = self.learn_scheme().await?;
            if scheme != Scheme::Unknown {
                self.state().scheme = scheme.clone();
            }
        }
        let (realm, service) = match scheme {
            Scheme::Open => return Ok(None),
            // Not learnt yet (the registry answered neither 200 nor 401): the login, if any.
            Scheme::Unknown | Scheme::Basic => return Ok(self.basic()),
            Scheme::Bearer { realm, service } => (realm, service),
        };
        let key = scope.clone().unwrap_or_default();
        if let Some((token, until)) = self.state().tokens.get(&key)
            && Instant::now() < *until
        {
            return Ok(Some(token.clone()));
        }
        let (token, until) = self
            .fetch_token(&realm, service.as_deref(), scope.as_deref())
            .await?;
        let mut state = self.state();
        let now = Instant::now();
        state.tokens.retain(|_, (_, until)| now < *until);
        if state.tokens.len() >= MAX_TOKENS {
            state.tokens.clear();
        }
        state.tokens.insert(key, (token.clone(), until));
        Ok(Some(token))
    }
}

/// What `bridge check` does for a registry: its challenge, a token when it asks for one, and
/// an authenticated `GET /v2/`, as a pull starts; the error says which step failed.
pub async fn check_registry(cfg: &Registry) -> Result<String, String> {
    let kind = RegistryKind::new(cfg.clone());
    let authorization = kind
        .authorization(&Method::GET, "/v2/")
        .await
        .map_err(|refusal| refusal.why)?;
    let scheme = match &kind.state().scheme {
        Scheme::Bearer { .. } => "token",
        Scheme::Basic => "Basic",
        _ => "no login",
    };
    let mut req = http::Request::get(kind.url("/v2/"))
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    if let Some(value) = authorization {
        req.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let response = tokio::time::timeout(AUTH_TIMEOUT, kind.client.request(req))
        .await
        .map_err(|_| format!("GET /v2/ timed out after {AUTH_TIMEOUT:?}"))?
        .map_err(|e| format!("GET /v2/ failed: {e}"))?;
    match response.status().as_u16() {
        200 => Ok(format!("ok (GET /v2/ with {scheme}: HTTP 200)")),
        401 | 403 => Err(format!(
            "login rejected (GET /v2/ with {scheme}: HTTP {}): check registries[].auth",
            response.status().as_u16()
        )),
        other => Err(format!("GET /v2/ answered HTTP {other}")),
    }
}

impl RegistryKind {
    /// Whether the bridge may send a request to `url`, which a registry answer named: on the
    /// registry's own scheme, host and port, or on a host of `listed` (a bare host meaning the
    /// default port of the registry's scheme) over https, or over the registry's own scheme.
    fn trusted(&self, url: &Url, listed: &[String]) -> bool {
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
}

impl RegistryKind {
    /// A `Location` as the cloud can prefix it: `/v2/…` on the registry's own origin (absolute
    /// or not, under the entry's base path), or `None` for one that names another origin.
    fn relative(&self, location: &str) -> Option<String> {
        let url = self.cfg.url.join(location).ok()?;
        if url.scheme() != self.cfg.url.scheme() || host_port(&url) != host_port(&self.cfg.url) {
            return None;
        }
        let base = self.cfg.url.path().trim_end_matches('/');
        let path = url.path().strip_prefix(base).unwrap_or(url.path());
        Some(match url.query() {
            Some(query) => format!("{path}?{query}"),
            None => path.to_string(),
        })
    }
}

/// `host:port` of a URL (the port its scheme implies when it names none).
fn host_port(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// The scheme a `WWW-Authenticate` value asks for; `None` when it is neither Basic nor a
/// usable Bearer challenge.
fn parse_challenge(value: &str) -> Option<Scheme> {
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

fn is_pull(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// The repository a cross-repository blob mount (`POST …/blobs/uploads/?mount=D&from=REPO`)
/// reads from, when its name is a valid repository name.
fn mount_source(query: Option<&str>) -> Option<String> {
    let from = url::form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == "from")?
        .1
        .into_owned();
    let valid = !from.is_empty()
        && from.split('/').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
    valid.then_some(from)
}

/// The token scope a request needs: `repository:NAME:pull` (`pull,push` when `pushing`) for
/// `/v2/NAME/{manifests,blobs,tags}/…`, `registry:catalog:*` for the catalog, none for `/v2/`.
fn scope_of(path: &str, pushing: bool) -> Option<String> {
    let rest = path.strip_prefix("/v2/")?;
    if rest.is_empty() {
        return None;
    }
    if rest.starts_with("_catalog") {
        return Some("registry:catalog:*".to_string());
    }
    let end = ["/manifests/", "/blobs/", "/tags/"]
        .iter()
        .filter_map(|marker| rest.find(marker))
        .min()?;
    let actions = if pushing { "pull,push" } else { "pull" };
    Some(format!("repository:{}:{actions}", &rest[..end]))
}

impl Kind for RegistryKind {
    fn max_connections(&self) -> Option<u32> {
        self.cfg.max_connections
    }

    fn base_url(&self) -> &Url {
        &self.cfg.url
    }

    fn admit(&self, method: &Method, path: &str, query: Option<&str>) -> Result<String, Refusal> {
        if !path.starts_with("/v2/") {
            return Err(Refusal::not_found(
                "registry: /v2/ only",
                "only the OCI distribution API (/v2/…) passes this bridge",
            ));
        }
        let pulling = is_pull(method);
        let pushing = [Method::POST, Method::PUT, Method::PATCH].contains(method);
        let admitted = pulling || (pushing && self.cfg.allow_push);
        if !admitted {
            let why = if pushing {
                format!(
                    "registry {:?} is pull-only on this bridge: {method} is refused (its operator can set allow_push: true on the entry)",
                    self.cfg.name
                )
            } else {
                format!(
                    "{method} is refused on registry {:?}: only pulls (GET, HEAD) and, with allow_push, pushes (POST, PUT, PATCH) pass",
                    self.cfg.name
                )
            };
            return Err(Refusal::forbidden("registry: pull only", why));
        }
        let from = query
            .and_then(|q| url::form_urlencoded::parse(q.as_bytes()).find(|(key, _)| key == "from"));
        if pushing && let Some((_, from)) = from {
            // A mount copies a blob out of another repository: that read must pass as well.
            let source = mount_source(query).map(|repo| format!("/v2/{repo}/blobs/"));
            let readable = source.as_deref().is_some_and(|source| {
                self.cfg.allow.is_empty() || allowed(&self.cfg.allow, "GET", source).is_some()
            });
            if !readable {
                return Err(Refusal::forbidden(
                    "registry: mount source",
                    format!(
                        "a blob mount from repository {from:?} is refused: this entry's allow rules do not let it be read"
                    ),
                ));
            }
        }
        if !self.cfg.allow.is_empty() {
            return allowed(&self.cfg.allow, method.as_str(), path).ok_or_else(|| {
                Refusal::forbidden(
                    "no matching allow rule",
                    "no allow rule of this registry matches the method and path",
                )
            });
        }
        Ok(if pulling {
            "registry pull (GET, HEAD)".to_string()
        } else {
            "registry push (allow_push: true)".to_string()
        })
    }

    /// Credentials come from [`Kind::authorize`]: which ones depends on the registry's challenge.
    fn upstream_request_filter(&self, _headers: &mut HeaderMap) {}

    fn authorize<'a>(
        &'a self,
        method: &'a Method,
        path: &'a str,
        query: Option<&'a str>,
    ) -> Authorize<'a> {
        Box::pin(async move {
            let scope = scope_of(path, !is_pull(method)).map(|scope| {
                match mount_source(query) {
                    // A cross-repository mount reads the source repository too.
                    Some(from) => format!("{scope} repository:{from}:pull"),
                    None => scope,
                }
            });
            self.authorization_for(scope).await
        })
    }

    fn keeps_request(&self) -> bool {
        true
    }

    fn follow<'a>(&'a self, sent: &'a Sent, response: Response<Incoming>) -> Follow<'a> {
        Box::pin(async move {
            let response = self.retry_unauthorized(sent, response).await?;
            self.follow_redirects(sent, response).await
        })
    }

    /// The registry refusing the entry's login is the bridge operator's problem: passed on,
    /// its challenge would make the client ask its user for a password that cannot help.
    /// Also turns an absolute `Location` on the registry's own origin (Distribution names
    /// upload URLs so) into a path, which the cloud then prefixes with its own: the internal
    /// URL never reaches the client, and a chunked upload's next request comes back through
    /// the cloud.
    fn response_filter(&self, status: StatusCode, headers: &mut HeaderMap) -> Option<Refusal> {
        // The registry's own cookies (sessions, CSRF) are for its web UI, not for callers.
        headers.remove(header::SET_COOKIE);
        if let Some(location) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok()) {
            match self.relative(location) {
                Some(path) => {
                    if let Ok(path) = HeaderValue::from_str(&path) {
                        headers.insert(header::LOCATION, path);
                    }
                }
                // An absolute URL elsewhere would show the caller an internal host.
                None => {
                    tracing::warn!(registry = %self.cfg.name, "dropped a Location naming another host");
                    headers.remove(header::LOCATION);
                }
            }
        }
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            return None;
        }
        let how = if self.cfg.auth.is_some() {
            "rejected the login in the entry's auth (wrong, expired or lacking pull access?)"
        } else {
            "wants a login and the entry has no auth"
        };
        Some(Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: "upstream_auth",
            rule: format!("registry answered {}", status.as_u16()),
            why: format!(
                "registry {:?} {how} (HTTP {}); the bridge's operator must fix registries[].auth",
                self.cfg.name,
                status.as_u16()
            ),
        })
    }

    /// An OCI error body: registry clients print its message.
    fn refusal(&self, status: StatusCode, why: &str) -> http::Response<super::ResBody> {
        let mut r = super::kind::text(status, "");
        *r.body_mut() = super::kind::full(tunnel::oci::error_body(status.as_u16(), why));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> RegistryKind {
        RegistryKind::new(Registry {
            name: "reg".into(),
            url: "https://registry.internal".parse().unwrap(),
            auth: None,
            token_hosts: Vec::new(),
            redirect_hosts: Vec::new(),
            allow_push: false,
            allow: Vec::new(),
            max_connections: None,
        })
    }

    #[test]
    fn pulls_pass_and_everything_else_is_refused() {
        let r = registry();
        assert!(
            r.admit(&Method::GET, "/v2/team/app/manifests/1.0", None)
                .is_ok()
        );
        assert!(
            r.admit(&Method::HEAD, "/v2/team/app/blobs/sha256:ab", None)
                .is_ok()
        );
        let push = r
            .admit(&Method::PUT, "/v2/team/app/manifests/1.0", None)
            .unwrap_err();
        assert_eq!(push.status, StatusCode::FORBIDDEN);
        let outside = r.admit(&Method::GET, "/metrics", None).unwrap_err();
        assert_eq!(outside.status, StatusCode::NOT_FOUND);
    }

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
    }

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
    }
}
