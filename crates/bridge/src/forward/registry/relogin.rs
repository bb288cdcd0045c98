//! What the bridge does when a registry answers `401`: to the request first sent (a token
//! refused before its end, a registry moved between Basic and token auth), and on the
//! registry's own redirects, where its `/v2/` may have said nothing. Once per request.

use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::Empty;
use hyper::body::Incoming;

use super::super::kind::{Refusal, Sent};
use super::auth::{AUTH_TIMEOUT, AuthState, Scheme, parse_challenge};
use super::{RegistryKind, request_scope, scope_of};

impl RegistryKind {
    /// A token refused (`401` to a `GET` or `HEAD` that carried one: it expired early, or the
    /// registry restarted with new keys) is dropped, and the request sent once more with a new
    /// one; so is a pull that carried none when the registry now asks for a token (it moved
    /// from Basic to token auth). Says whether it sent the request again: a request gets one
    /// such retry at most, redirects included.
    pub(super) async fn retry_unauthorized(
        &self,
        sent: &Sent,
        response: Response<Incoming>,
    ) -> Result<(Response<Incoming>, bool), Refusal> {
        let Some((uri, headers)) = &sent.head else {
            return Ok((response, false));
        };
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok((response, false));
        }
        let had_token = is_token(headers.get(header::AUTHORIZATION));
        let path = self.under_base(uri);
        let pulling = sent.method == Method::GET || sent.method == Method::HEAD;
        let challenge = challenge_of(&response);
        if !had_token {
            // The registry wants what the bridge did not send: its authentication changed, or
            // the login is wrong. Its challenge is learnt again; a pull is sent once more when
            // it now asks for a token (else this 401 becomes the 502 that names
            // registries[].auth).
            self.state().scheme = Scheme::Unknown;
            if !pulling || !matches!(challenge, Some(Scheme::Bearer { .. })) {
                return Ok((response, false));
            }
        } else if matches!(challenge, Some(Scheme::Basic)) {
            // A token where the registry now asks for Basic: it moved back from a token
            // service. Its challenge is learnt again, and a pull sent once more with the login.
            self.state().scheme = Scheme::Unknown;
        }
        // A cross-repository mount's token is kept under both repositories' scopes.
        let mount = request_scope(&sent.method, path, uri.query());
        drop_tokens(
            &mut self.state(),
            [scope_of(path, false), scope_of(path, true), mount],
        );
        if !pulling {
            return Ok((response, false));
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
            Ok(Ok(response)) => Ok((response, true)),
            _ => Err(failed()),
        }
    }

    /// A `401` on one of the registry's own redirects, whose hop carried `sent`: the login to
    /// send that hop once more with, or `None`. A token refused there before its end is
    /// replaced; an open registry that now asks is learnt again from `/v2/`. A registry whose
    /// `/v2/` gives no challenge (it redirects too) is learnt from the redirects' challenges
    /// instead: a token flow, kept only once a token is had, and given up when a token is
    /// answered with a Basic challenge. Any other challenge is that path's own and changes
    /// nothing: a scheme learnt from `/v2/` stands.
    ///
    /// `seen` is the scheme `sent` was chosen under: when another request changed it since,
    /// that request learnt what this `401` says, and the hop is sent once more as it now is.
    pub(super) async fn relogin_hop(
        &self,
        method: &Method,
        path: &str,
        (sent, seen): (Option<&HeaderValue>, &Scheme),
        response: &Response<Incoming>,
    ) -> Result<Option<HeaderValue>, Refusal> {
        let had_token = is_token(sent);
        let challenge = challenge_of(response);
        let learn = {
            let mut state = self.state();
            if state.scheme != *seen {
                None
            } else {
                match challenge {
                    Some(Scheme::Bearer { realm, service }) if state.scheme == Scheme::Unknown => {
                        Some((realm, service))
                    }
                    Some(Scheme::Basic) if had_token && state.learnt_on_redirect => {
                        state.scheme = Scheme::Unknown;
                        state.learnt_on_redirect = false;
                        None
                    }
                    Some(Scheme::Bearer { .. }) | None if had_token => {
                        drop_tokens(&mut state, [scope_of(path, false), scope_of(path, true)]);
                        None
                    }
                    _ if sent.is_none() && state.scheme == Scheme::Open => {
                        state.scheme = Scheme::Unknown;
                        None
                    }
                    _ => return Ok(None),
                }
            }
        };
        let login = match learn {
            // Learnt only once a token is had: one path's token service that gives none (or
            // one the entry does not trust) does not become the registry's.
            Some((realm, service)) => {
                let scope = scope_of(path, false);
                let (token, until) = self
                    .fetch_token(&realm, service.as_deref(), scope.as_deref())
                    .await?;
                {
                    let mut state = self.state();
                    if state.scheme == Scheme::Unknown {
                        state.scheme = Scheme::Bearer { realm, service };
                        state.learnt_on_redirect = true;
                    }
                }
                self.keep_token(scope.unwrap_or_default(), token.clone(), until);
                Some(token)
            }
            None => self.authorization(method, path).await?,
        };
        // The same login again would be refused again.
        Ok(login.filter(|login| Some(login) != sent))
    }
}

/// Whether `authorization` is a token (not Basic, not none).
fn is_token(authorization: Option<&HeaderValue>) -> bool {
    authorization
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "))
}

/// The scheme a `401` asks for, when its challenge is one the bridge knows.
fn challenge_of(response: &Response<Incoming>) -> Option<Scheme> {
    response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_challenge)
}

/// Forgets the tokens kept under `scopes` (`None`: the registry-wide one): the registry
/// refused one of them.
fn drop_tokens(state: &mut AuthState, scopes: impl IntoIterator<Item = Option<String>>) {
    for scope in scopes {
        state.tokens.remove(&scope.unwrap_or_default());
    }
}
