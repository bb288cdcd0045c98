//! `registries` (OCI distribution API): pulls pass, `GET` and `HEAD` under `/v2/`, checked here
//! before anything reaches the registry; the entry's login is sent as HTTP Basic, the way
//! Distribution with htpasswd, Nexus and Artifactory take it. Refusals are OCI error bodies
//! (`{"errors":[{"code":"DENIED",…}]}`), which registry clients print to their user.

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use url::Url;

use super::kind::{Kind, Refusal};
use crate::config::{Registry, basic_authorization};
use crate::rules::allowed;

impl Kind for Registry {
    fn max_connections(&self) -> Option<u32> {
        self.max_connections
    }

    fn base_url(&self) -> &Url {
        &self.url
    }

    fn admit(&self, method: &Method, path: &str, _query: Option<&str>) -> Result<String, Refusal> {
        if !path.starts_with("/v2/") {
            return Err(Refusal::not_found(
                "registry: /v2/ only",
                "only the OCI distribution API (/v2/…) passes this bridge",
            ));
        }
        if method != Method::GET && method != Method::HEAD {
            return Err(Refusal::forbidden(
                "registry: pull only",
                format!(
                    "registry {:?} is pull-only on this bridge: {method} is refused (only GET and HEAD pass)",
                    self.name
                ),
            ));
        }
        if !self.allow.is_empty() {
            return allowed(&self.allow, method.as_str(), path).ok_or_else(|| {
                Refusal::forbidden(
                    "no matching allow rule",
                    "no allow rule of this registry matches the method and path",
                )
            });
        }
        Ok("registry pull (GET, HEAD)".to_string())
    }

    fn upstream_request_filter(&self, headers: &mut HeaderMap) {
        if let Some(login) = &self.auth
            && let Ok(v) =
                HeaderValue::from_str(&basic_authorization(&login.username, &login.password))
        {
            headers.insert(header::AUTHORIZATION, v);
        }
    }

    /// The registry refusing the entry's login is the bridge operator's problem: passed on,
    /// its challenge would make the client ask its user for a password that cannot help.
    fn response_filter(&self, status: StatusCode, headers: &HeaderMap) -> Option<Refusal> {
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            return None;
        }
        let challenge = headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let how = if challenge
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("bearer")
        {
            "asks for a Bearer token (token authentication), which this bridge release cannot answer yet: only Basic logins are sent"
        } else if self.auth.is_some() {
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
                self.name,
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

    fn registry() -> Registry {
        Registry {
            name: "reg".into(),
            url: "https://registry.internal".parse().unwrap(),
            auth: None,
            allow: Vec::new(),
            max_connections: None,
        }
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
    fn a_token_challenge_is_named() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"https://auth.internal/token\""),
        );
        let refusal = registry()
            .response_filter(StatusCode::UNAUTHORIZED, &headers)
            .unwrap();
        assert_eq!(refusal.status, StatusCode::BAD_GATEWAY);
        assert!(refusal.why.contains("Bearer token"), "{}", refusal.why);
        assert!(
            registry()
                .response_filter(StatusCode::NOT_FOUND, &headers)
                .is_none()
        );
    }
}
