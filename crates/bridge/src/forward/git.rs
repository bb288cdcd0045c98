//! `sources` (Git over smart HTTP): only Git's two services pass, fetch (`git-upload-pack`)
//! always and push (`git-receive-pack`) only with `allow_push: true`, both checked here, at
//! the bridge, before anything reaches the server; `repositories` globs limit which paths are
//! reachable. The entry's token is injected as Basic (user `x-access-token` unless the entry
//! names one), Bearer or Basic with a password. Refusals are `text/plain`, which `git` prints
//! to its user as `remote: …`.

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use url::Url;

use super::kind::{Kind, Refusal};
use super::upstream::path_under;
use crate::config::GitSource;
use crate::rules::allowed;
use tunnel::repositories::listed;

/// Git's fetch service.
const UPLOAD_PACK: &str = "git-upload-pack";
/// Git's push service.
const RECEIVE_PACK: &str = "git-receive-pack";

/// The service a smart-HTTP request asks for, and the repository path it names.
fn service<'a>(method: &Method, path: &'a str, query: Option<&str>) -> Option<(&'a str, String)> {
    if let Some(repo) = path.strip_suffix("/info/refs") {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        // Every `service` parameter: servers differ on which of two they heed (git's own
        // http-backend takes the last), so two are one unknown service, never the first alone;
        // and some split a query on `;` too, so `;` separates here as well.
        let query = query.unwrap_or("").replace(';', "&");
        let services: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "service")
            .map(|(_, v)| v.into_owned())
            .collect();
        return (!services.is_empty()).then(|| (repo, services.join("&")));
    }
    for svc in [UPLOAD_PACK, RECEIVE_PACK] {
        if let Some(repo) = path.strip_suffix(svc).and_then(|r| r.strip_suffix('/')) {
            return (method == Method::POST).then(|| (repo, svc.to_string()));
        }
    }
    None
}

impl Kind for GitSource {
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
        let Some((repo, service)) = service(method, path, query) else {
            return Err(Refusal::forbidden(
                "git: smart HTTP only",
                "only Git's smart HTTP protocol passes this bridge (GET …/info/refs?service=git-upload-pack, POST …/git-upload-pack)",
            ));
        };
        // An empty path names the url itself: a source whose url is one repository. Under
        // `repositories` globs the url is a server root, and a path must name a repository.
        let bare_root = repo.trim_start_matches('/').is_empty();
        // A url ending in `.git` is one repository: a path after it names nothing there (a
        // caller who took the source for a server root).
        let one_repository =
            self.repositories.is_empty() && self.url.path().trim_end_matches('/').ends_with(".git");
        if one_repository && !bare_root {
            return Err(Refusal::not_found(
                "git: repositories",
                format!(
                    "source {:?} is one repository (its url ends in .git): clone …/git/{} itself, with no path after it",
                    self.name, self.name
                ),
            ));
        }
        if (bare_root && !self.repositories.is_empty()) || !listed(&self.repositories, repo) {
            let said = match repo.trim_start_matches('/') {
                "" => format!(
                    "source {:?} is a server root: name a repository after it (…/git/{}/{})",
                    self.name,
                    self.name,
                    self.first_named_repository()
                        .map_or("REPOSITORY", |r| r.trim_start_matches('/'))
                ),
                repo => format!(
                    "source {:?} has no repository {repo:?} reachable through this bridge (see the entry's repositories)",
                    self.name
                ),
            };
            return Err(Refusal::not_found("git: repositories", said));
        }
        let rule = match service.as_str() {
            UPLOAD_PACK => "git fetch (git-upload-pack)",
            RECEIVE_PACK if self.allow_push => "git push (allow_push: true)",
            RECEIVE_PACK => {
                return Err(Refusal::forbidden(
                    "git: fetch only",
                    format!(
                        "pushing is not allowed: source {:?} is fetch-only on this bridge (its operator can set allow_push: true on the entry)",
                        self.name
                    ),
                ));
            }
            other => {
                return Err(Refusal::forbidden(
                    "git: unknown service",
                    format!(
                        "unknown Git service {other:?}; send one service parameter, git-upload-pack or git-receive-pack"
                    ),
                ));
            }
        };
        if !self.allow.is_empty() {
            let admitted = allowed(&self.allow, method.as_str(), path).ok_or_else(|| {
                Refusal::forbidden(
                    "no matching allow rule",
                    format!(
                        "{method} {path} matches no allow rule of the bridge's sources entry {:?}; the bridge's operator can add one",
                        self.name
                    ),
                )
            })?;
            // git prints a refusal's words only for its first request, `GET …/info/refs`: the
            // `POST` that follows is checked now too, so that a rule admitting only the first
            // is said where git shows it (protocol v2 lists refs by `POST` as well).
            let post = format!("{repo}/{service}");
            if path.ends_with("/info/refs") && allowed(&self.allow, "POST", &post).is_none() {
                return Err(Refusal::forbidden(
                    "no matching allow rule",
                    format!(
                        "POST {post}, which git sends after {method} {path}, matches no allow rule of the bridge's sources entry {:?}; the bridge's operator can add one",
                        self.name
                    ),
                ));
            }
            return Ok(admitted);
        }
        Ok(rule.to_string())
    }

    /// The server refusing the entry's credentials is the bridge operator's problem, not the
    /// caller's: passed on, its challenge would make `git` ask the user for a password that
    /// no password of theirs can fix.
    fn response_filter(&self, status: StatusCode, headers: &mut HeaderMap) -> Option<Refusal> {
        // A redirect (a forge moving `team/lib` to `team/lib.git`) is followed through the
        // tunnel: the server's own address becomes the tunnel's path. Any other address is
        // never shown to the caller; git is told, in words, that it leads out of the source.
        if status.is_redirection()
            && let Some(location) = headers.get(header::LOCATION)
        {
            let tunnel_path = location
                .to_str()
                .ok()
                .and_then(|l| path_under(&self.url, l))
                .map(|rest| format!("/git/{}{rest}", self.name))
                .and_then(|p| HeaderValue::from_str(&p).ok());
            match tunnel_path {
                Some(value) => headers.insert(header::LOCATION, value),
                None => {
                    // The operator learns where, without credentials or query values (a
                    // signed URL's); the caller does not.
                    let shown = location.to_str().map_or_else(
                        |_| "(not text)".to_string(),
                        |l| match Url::parse(l) {
                            Ok(mut url) => {
                                let _ = url.set_username("");
                                let _ = url.set_password(None);
                                crate::audit::strip_query_values(url.as_str())
                            }
                            Err(_) => crate::audit::strip_query_values(l),
                        },
                    );
                    tracing::warn!(source = %self.name, location = %shown, "Git server redirected outside the source's url");
                    return Some(Refusal {
                        status: StatusCode::BAD_GATEWAY,
                        reason: "upstream_unavailable",
                        rule: format!(
                            "git server redirected outside the source ({})",
                            status.as_u16()
                        ),
                        why: format!(
                            "the Git server of source {:?} redirected this request outside the source's url (HTTP {}), where the bridge does not follow; the bridge's operator can point sources[].url at the new address (the bridge's log names it)",
                            self.name,
                            status.as_u16()
                        ),
                    });
                }
            };
        }
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            return None;
        }
        let how = if self.auth.is_some() {
            "rejected the credentials in the entry's auth (wrong or expired, or lacking read access, or write access for a push?)"
        } else {
            "wants credentials and the entry has no auth"
        };
        Some(Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: "upstream_auth",
            rule: format!("git server answered {}", status.as_u16()),
            why: format!(
                "the Git server of source {:?} {how} (HTTP {}); the bridge's operator must fix sources[].auth",
                self.name,
                status.as_u16()
            ),
        })
    }

    /// `text/plain`: git prints it to its user as `remote: …`.
    fn refusal(&self, status: StatusCode, why: &str) -> http::Response<super::ResBody> {
        super::kind::text(status, why)
    }

    fn injected(&self) -> Option<String> {
        self.auth.as_ref().map(|auth| auth.authorization())
    }

    fn upstream_request_filter(&self, headers: &mut HeaderMap) {
        if let Some(auth) = &self.auth
            && let Ok(v) = HeaderValue::from_str(&auth.authorization())
        {
            headers.insert(header::AUTHORIZATION, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_and_repositories() {
        let get = Method::GET;
        let post = Method::POST;
        let q = Some("service=git-upload-pack");
        assert_eq!(
            service(&get, "/team/lib.git/info/refs", q),
            Some(("/team/lib.git", UPLOAD_PACK.to_string()))
        );
        assert_eq!(
            service(&post, "/team/lib/git-receive-pack", None),
            Some(("/team/lib", RECEIVE_PACK.to_string()))
        );
        assert_eq!(service(&post, "/team/lib.git/info/refs", q), None);
        assert_eq!(service(&get, "/team/lib.git/git-upload-pack", None), None);
        assert_eq!(service(&get, "/team/lib.git/HEAD", None), None);
        assert_eq!(service(&get, "/team/lib.git/info/refs", None), None);
        // Two services are never read as the first one.
        for two in [
            "service=git-upload-pack&service=git-receive-pack",
            "service=git-upload-pack&x=1;service=git-receive-pack",
        ] {
            assert_eq!(
                service(&get, "/team/lib.git/info/refs", Some(two)),
                Some((
                    "/team/lib.git",
                    "git-upload-pack&git-receive-pack".to_string()
                ))
            );
        }
    }
}
