//! `registries` (OCI distribution API): pulls pass, `GET` and `HEAD` under `/v2/`, checked here
//! before anything reaches the registry. The entry's login answers the registry's challenge,
//! learnt once from an unauthenticated `GET /v2/` as registry clients do (auth.rs says when
//! it is learnt again):
//! - `Basic` (Distribution with htpasswd, Nexus, Artifactory): sent with every request;
//! - `Bearer` (the Docker token flow: Harbor, GitLab, Quay, Distribution with token auth): the
//!   bridge asks the challenge's `realm` for a token for the request's scope, with the login as
//!   Basic, caches it until it expires, and sends it. A realm on another host than the
//!   registry's is used only when the entry lists it in `token_hosts`.
//!
//! Refusals are OCI error bodies (`{"errors":[{"code":"DENIED",…}]}`), which registry clients
//! print to their user.
//!
//! This module admits requests and filters answers; `auth` learns the challenge and fetches
//! tokens; `redirects` follows the registry's redirects and checks the hosts its answers name.

mod auth;
mod redirects;
mod relogin;

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use url::Url;

use super::kind::{Authorize, Follow, Kind, Refusal, Sent};
use crate::config::{Registry, basic_authorization};
use crate::rules::allowed;

use auth::{AUTH_TIMEOUT, AuthState, Scheme};

/// A `registries` entry at work: its configuration, and what it learnt of the registry's
/// authentication.
pub(super) struct RegistryKind {
    cfg: Registry,
    /// `{bridge}/{entry}/` for each of the bridge's other entries on this entry's registry
    /// (the same `url`): how a client names their repositories in a blob mount's `from`.
    same_registry: Vec<String>,
    client: Client<super::upstream::Connector, Empty<Bytes>>,
    auth: std::sync::Mutex<AuthState>,
}

impl RegistryKind {
    /// The entry `cfg`, with nothing learnt yet.
    pub(super) fn new(cfg: Registry) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .build(super::https_connector(cfg.tls_ca_file.as_deref()));
        RegistryKind {
            cfg,
            same_registry: Vec::new(),
            client,
            auth: std::sync::Mutex::new(AuthState {
                scheme: Scheme::Unknown,
                learnt_on_redirect: false,
                tokens: HashMap::new(),
                unreachable: None,
            }),
        }
    }

    /// The entry as one of bridge `bridge`'s `registries`: a blob mount may name its source
    /// through any other of them on the same registry (the cloud has already cut the entry's
    /// own name).
    pub(super) fn among(mut self, bridge: &str, registries: &[Registry]) -> Self {
        self.same_registry = registries
            .iter()
            .filter(|other| other.url == self.cfg.url && other.name != self.cfg.name)
            .map(|other| format!("{bridge}/{}/", other.name))
            .collect();
        self
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

    /// A `502` for a registry, token service or storage host that cannot be reached, or that
    /// answered what the bridge cannot use: counted as `upstream_unavailable`.
    fn unavailable(&self, rule: &str, why: String) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: "upstream_unavailable",
            rule: rule.to_string(),
            why,
        }
    }

    /// A `502` for a login the token service refused, or that the bridge would not send (to
    /// an untrusted host): `upstream_auth`, where an alert on a rotated credential looks.
    fn login_refused(&self, rule: &str, why: String) -> Refusal {
        Refusal {
            reason: "upstream_auth",
            ..self.unavailable(rule, why)
        }
    }
}

/// What `bridge check` does for a registry: its challenge, a token when it asks for one, and
/// an authenticated `GET /v2/`, as a pull starts; the error says which step failed.
pub async fn check_registry(cfg: &Registry) -> Result<String, String> {
    if let Some(Err(e)) = cfg.tls_ca_file.as_deref().map(crate::ca::load) {
        return Err(format!("tls_ca_file: {e}"));
    }
    let kind = RegistryKind::new(cfg.clone());
    let authorization = kind
        .authorization(&Method::GET, "/v2/")
        .await
        .map_err(|refusal| {
            let mut state = kind.state();
            let unreachable = state.unreachable.take();
            match &state.scheme {
                // `check` is the operator's: the host the bridge would not trust is theirs to
                // see, and the whole cause of a failed connection, as the log has it.
                Scheme::Bearer { realm, .. } if refusal.why.contains(auth::HOST_IN_LOG) => format!(
                    "{} (token service: {})",
                    refusal.why.replace(auth::HOST_IN_LOG, ""),
                    realm.as_str()
                ),
                _ => unreachable.unwrap_or(refusal.why),
            }
        })?;
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
        401 | 403 if cfg.auth.is_none() => Err(format!(
            "the registry asks for a login (GET /v2/: HTTP {}) and the entry has none: set registries[].auth",
            response.status().as_u16()
        )),
        401 | 403 => Err(format!(
            "login rejected (GET /v2/ with {scheme}: HTTP {}): check registries[].auth",
            response.status().as_u16()
        )),
        other => Err(format!("GET /v2/ answered HTTP {other}")),
    }
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
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
    valid.then_some(from)
}

/// The token scope of a request: its repository's, and for a cross-repository mount the
/// source repository's too (a mount reads it).
fn request_scope(method: &Method, path: &str, query: Option<&str>) -> Option<String> {
    scope_of(path, !is_pull(method)).map(|scope| match mount_source(query) {
        Some(from) => format!("{scope} repository:{from}:pull"),
        None => scope,
    })
}

/// The token scope a request needs: `repository:NAME:pull` (`pull,push` when `pushing`) for
/// `/v2/NAME/{manifests,blobs,tags,referrers}/…`, `registry:catalog:*` for the catalog, none
/// for `/v2/`. NAME ends at the last marker: a repository may itself have a component named
/// `tags` or `blobs` (`team/tags/app`); what follows the marker never has one (a tag, a
/// digest, an upload id, `list`).
fn scope_of(path: &str, pushing: bool) -> Option<String> {
    let rest = path.strip_prefix("/v2/")?;
    if rest.is_empty() {
        return None;
    }
    if rest.starts_with("_catalog") {
        return Some("registry:catalog:*".to_string());
    }
    let end = ["/manifests/", "/blobs/", "/tags/", "/referrers/"]
        .iter()
        .filter_map(|marker| rest.rfind(marker))
        .max()?;
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

    /// The entry's Basic login: what a Basic registry gets on every request, and a registry
    /// (or a debugging proxy before it) may repeat in an answer's header.
    fn injected(&self) -> Option<String> {
        self.basic()?.to_str().ok().map(str::to_string)
    }

    fn tls_ca_file(&self) -> Option<&std::path::Path> {
        self.cfg.tls_ca_file.as_deref()
    }

    /// A mount's source named through another entry on the same registry is the registry's
    /// repository of that name: checked and mounted as if the client had named it so (the
    /// cloud already did that for the stream's own entry).
    fn local_query<'q>(&self, query: &'q str) -> std::borrow::Cow<'q, str> {
        tunnel::oci::mount_source_as_registry_knows(query, &self.same_registry)
    }

    fn admit(&self, method: &Method, path: &str, query: Option<&str>) -> Result<String, Refusal> {
        if !path.starts_with("/v2/") {
            return Err(Refusal::not_found(
                "registry: /v2/ only",
                "only the OCI distribution API (/v2/…) passes this bridge",
            ));
        }
        // A repository name has no empty component; the registry would redirect `a//b` to
        // `a/b` (and `//a`, `…/1.0/` alike), so such a path is the caller's mistake, said as
        // one. Only `/v2/` and an upload's start (`…/blobs/uploads/`) end in `/`.
        let under = &path["/v2/".len()..];
        let trailing = path.ends_with('/') && path != "/v2/" && !path.ends_with("/blobs/uploads/");
        if under.starts_with('/') || under.contains("//") || trailing {
            return Err(Refusal {
                status: StatusCode::BAD_REQUEST,
                reason: "bad_path",
                rule: "path-normalisation".into(),
                why: format!(
                    "{}an empty segment (a leading, doubled or trailing /), which no repository name or reference has; send the path without it",
                    super::admit::PATH_REFUSAL
                ),
            });
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
            let rule = if self.cfg.allow_push {
                "registry: pull and push only"
            } else {
                "registry: pull only"
            };
            return Err(Refusal::forbidden(rule, why));
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
                    format!(
                        "{method} {path} matches no allow rule of the bridge's registries entry {:?}; the bridge's operator can add one",
                        self.cfg.name
                    ),
                )
            });
        }
        Ok(if pulling {
            "registry pull (GET, HEAD)".to_string()
        } else {
            "registry push (allow_push: true)".to_string()
        })
    }

    /// A registry server reads a request's parameters from a form body as well as from its query
    /// (Go's `FormValue`, the body's first): a blob mount's `from` sent so would pass unchecked.
    /// No registry client sends a form.
    fn admit_headers(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        // Read as Go reads it: bytes beyond ASCII kept (not a reason to skip the value), Unicode
        // spaces trimmed.
        let form = headers.get_all(header::CONTENT_TYPE).iter().any(|v| {
            let t = String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase();
            t.contains("application/x-www-form-urlencoded") || t.contains("multipart/form-data")
        });
        if form && !is_pull(method) {
            return Err(Refusal::forbidden(
                "registry: form body",
                "a registry request with a form body is refused: its parameters (a blob mount's from) go in the query",
            ));
        }
        Ok(())
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
            self.authorization_for(request_scope(method, path, query))
                .await
        })
    }

    fn keeps_request(&self) -> bool {
        true
    }

    fn follow<'a>(&'a self, sent: &'a Sent, response: Response<Incoming>) -> Follow<'a> {
        Box::pin(async move {
            let (response, retried) = self.retry_unauthorized(sent, response).await?;
            self.follow_redirects(sent, response, retried).await
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
        if let Some(location) = headers.get(header::LOCATION) {
            let path = location
                .to_str()
                .ok()
                .and_then(|l| self.relative(l))
                .and_then(|p| HeaderValue::from_str(&p).ok());
            match path {
                Some(path) => {
                    headers.insert(header::LOCATION, path);
                }
                // An absolute URL elsewhere would show the caller an internal host (and one
                // that is not text cannot be read to tell).
                None => {
                    tracing::warn!(registry = %self.cfg.name, "dropped a Location naming another host or scheme");
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
        let body =
            if status == StatusCode::BAD_REQUEST && why.starts_with(super::admit::PATH_REFUSAL) {
                tunnel::oci::path_error_body(why)
            } else {
                tunnel::oci::error_body(status.as_u16(), why)
            };
        *r.body_mut() = super::kind::full(body);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

#[cfg(test)]
mod tests;
