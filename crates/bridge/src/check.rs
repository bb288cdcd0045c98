//! `bridge check`: validate the configuration, then try the cloud (DNS, TCP, proxy, TLS) and each
//! resource (DNS, TCP; for APIs and Git sources an HTTP request with the entry's credentials;
//! for registries their challenge, token and an authenticated `GET /v2/`), and print a table.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::{Config, Database, GitSource};
use crate::{dial, forward, identity, postgres};

/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of the connect request's resource list that leave room in the cloud's 16 KiB
/// head for the token, the other headers and the request line.
const ANNOUNCED_MOST: usize = 15 * 1024;

/// One line of the table.
struct Row {
    kind: &'static str,
    name: String,
    target: String,
    result: Result<String, String>,
}

async fn probe_cloud(cfg: &Config) -> Row {
    let host = cfg.api_url.host_str().unwrap_or("").to_string();
    let port = cfg.api_url.port_or_known_default().unwrap_or(443);
    let proxy = cfg.proxy_for(&host, port);
    // Said with the ok, so that an operator sees whether the proxy (or no_proxy) took effect.
    let through = proxy.map_or_else(
        || ", direct".to_string(),
        |p| format!(", through the proxy {p}"),
    );
    let result = async {
        let tcp = dial::tcp(&host, port, proxy)
            .await
            .map_err(|e| e.to_string())?;
        let tls = identity::trust(cfg)
            .and_then(|t| {
                tunnel::tls::client_config(t, None)
                    .map_err(|e| identity::AgentError::Tls(e.to_string()))
            })
            .map_err(|e| e.to_string())?;
        dial::tls(tcp, &host, tls)
            .await
            .map_err(|e| e.to_string())?;
        // The resources the connect request announces must fit the head the cloud reads.
        let announced = serde_json::to_string(&crate::agent::announced_resources(cfg))
            .map_or(0, |json| json.len());
        if announced > ANNOUNCED_MOST {
            return Err(format!(
                "the connect request would announce {announced} bytes of resources, more than the cloud reads in a request's head ({ANNOUNCED_MOST} bytes, with room for the other headers): too many resources, or names too long; split the entries over two bridges"
            ));
        }
        // "ok" must mean "ready to connect": the token is proven too, by an enrollment whose
        // certificate is thrown away (nothing is saved, nothing changes on the cloud); or, for
        // a configured certificate, by the tunnel's own checks with it, and no tunnel.
        let identity =
            identity::Identity::new(std::sync::Arc::new(cfg.clone())).map_err(|e| e.to_string())?;
        let configured = cfg.tls_cert_file.is_some();
        let proven = if configured {
            crate::agent::check_tunnel(cfg, &identity).await
        } else {
            identity.prove_token().await
        };
        let accepted = if configured {
            "token and tls_cert_file accepted"
        } else {
            "token accepted"
        };
        match proven {
            Ok(()) if !cfg.tls_verify => Ok(format!(
                "ok (TLS 1.3, {accepted}{through}; the certificate NOT verified: tls_verify is false)"
            )),
            Ok(()) => Ok(format!("ok (TLS 1.3, {accepted}{through})")),
            Err(identity::AgentError::Unauthorized(why))
                if why.starts_with("this token is for bridge") || why.contains("certificate") =>
            {
                Err(why)
            }
            Err(identity::AgentError::Unauthorized(why)) => {
                Err(format!("token rejected (revoked or wrong): {why}"))
            }
            Err(e) => Err(e.to_string()),
        }
    }
    .await;
    Row {
        kind: "cloud",
        name: cfg.name.clone(),
        target: format!("{host}:{port}"),
        result,
    }
}

/// A failed connection, said with what it most likely means.
fn unreachable(causes: &str) -> String {
    format!("unreachable: {causes}{}", connect_hint(causes))
}

/// What a failed connection most likely means, or nothing: a refused or unresolved one, an
/// unknown CA, else a TLS failure's advice as callers through the cloud get it. A cause that
/// already carries its own (`(the server …)`) gets none.
fn connect_hint(causes: &str) -> String {
    let hint = if causes.contains("Connection refused") {
        " (nothing accepts connections there: is the server running, and is the url's port right?)"
    } else if causes.contains("dns error") {
        " (the url's host name does not resolve from this host)"
    } else if causes.contains("UnknownIssuer") {
        " (the server's certificate is signed by a CA this host does not trust: set the entry's tls_ca_file to that CA's certificate)"
    } else {
        ""
    };
    // A connection's failure only: not a `tls_ca_file` that cannot be read, say.
    let tls = causes.contains("(Connect)")
        && matches!(
            forward::caller_summary(causes),
            "the TLS handshake failed" | "it closed the connection during the TLS handshake"
        );
    if hint.is_empty() && tls && !causes.contains(" (the server ") {
        format!(". {}", forward::caller_advice(causes))
    } else {
        hint.to_string()
    }
}

/// An HTTP GET of `url` with the credentials the forwarder would inject for `kind`: proves
/// DNS, TCP, TLS and, by a 401 or 403, credentials the resource rejects; a 5xx is a server
/// that is up but failing (or a proxy in front of it that cannot reach it). Any other answer
/// is ok (an API's root may well be a 404), except a 404 where `missing` says what it means.
async fn probe_http(
    label: &'static str,
    name: &str,
    url: String,
    kind: &dyn forward::Kind,
    missing: Option<&str>,
) -> Row {
    if let Some(Err(e)) = kind.tls_ca_file().map(crate::ca::load) {
        return Row {
            kind: label,
            name: name.to_string(),
            target: url,
            result: Err(format!("tls_ca_file: {e}")),
        };
    }
    let client: Client<_, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(forward::https_connector(kind.tls_ca_file()));
    let section = if label == "git" { "sources" } else { "apis" };
    let result = match hyper::Request::get(url.as_str()).body(Empty::new()) {
        Err(e) => Err(e.to_string()),
        Ok(mut req) => {
            kind.upstream_request_filter(req.headers_mut());
            // An entry with no `auth` adds nothing: a 401 is then no rejected credential.
            let credentials = !req.headers().is_empty();
            match tokio::time::timeout(PROBE_TIMEOUT, client.request(req)).await {
                Err(_) => Err(format!(
                    "no answer to GET within {} s (connecting, TLS or the reply): check that {section}[].url is the server's HTTP address and that it answers",
                    PROBE_TIMEOUT.as_secs()
                )),
                Ok(Err(e)) => Err(unreachable(&forward::causes(&e))),
                Ok(Ok(r)) if r.status().as_u16() == 401 && !credentials => Err(format!(
                    "the server asks for credentials (HTTP 401) and the entry has none: set {section}[].auth"
                )),
                Ok(Ok(r)) if r.status().as_u16() == 403 && !credentials => Err(format!(
                    "refused (HTTP 403) without credentials: set {section}[].auth if the server needs some, else check what it allows this host (an address allow-list?)"
                )),
                Ok(Ok(r)) if matches!(r.status().as_u16(), 401 | 403) => Err(format!(
                    "credentials rejected (HTTP {}): check {section}[].auth",
                    r.status().as_u16(),
                )),
                Ok(Ok(r)) if r.status().is_server_error() => Err(format!(
                    "the server answered HTTP {}: it is reachable but failing (or a proxy in front of it cannot reach what is behind it); check the server's own log",
                    r.status().as_u16(),
                )),
                Ok(Ok(r)) => match missing {
                    Some(what) if r.status() == hyper::StatusCode::NOT_FOUND => {
                        Err(format!("{what} (HTTP 404)"))
                    }
                    _ => {
                        // Git's own answer to `info/refs`, not just any page at that path.
                        let git_refs =
                            r.headers()
                                .get(hyper::header::CONTENT_TYPE)
                                .is_some_and(|v| {
                                    v.as_bytes()
                                        .starts_with(b"application/x-git-upload-pack-advertisement")
                                });
                        if missing.is_some() && !git_refs {
                            // A repository was expected there: a login page or an API's
                            // answer is not one.
                            Err(format!(
                                "HTTP {} but no Git repository's answer (no Git refs) at {url}: check {section}[].url and repositories",
                                r.status().as_u16()
                            ))
                        } else {
                            let what = if git_refs { ", a Git repository" } else { "" };
                            Ok(format!("ok (HTTP {}{what})", r.status().as_u16()))
                        }
                    }
                },
            }
        }
    };
    Row {
        kind: label,
        name: name.to_string(),
        target: url,
        result,
    }
}

/// A repository path as git puts it in a URL: each segment percent-encoded (a space as `%20`,
/// UTF-8 bytes as `%XX`), the `/` between them kept; one written encoded is not encoded twice.
fn path_encoded(repo: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}');
    crate::rules::decoded(repo)
        .split('/')
        .map(|segment| percent_encoding::utf8_percent_encode(segment, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// What `bridge check` fetches from a Git source, as `git clone` would: the refs of its first
/// repository named without a glob; without `repositories`, the refs of the url itself (a
/// source whose url is one repository answers them; a server root's 404 still proves the
/// credentials on servers that guard every path); with globs only, the server root. With a
/// repository's name (or a url ending in `.git`) comes what its 404 means: the entry names a
/// repository the server does not have; and such a repository must answer with Git's refs.
fn git_probe(source: &GitSource) -> (String, Option<String>) {
    let base = source.url.as_str().trim_end_matches('/');
    match source.first_named_repository() {
        Some(repo) => (
            format!(
                "{base}/{}/info/refs?service=git-upload-pack",
                path_encoded(repo)
            ),
            Some(format!(
                "no repository {repo:?} on the server: check sources[].url and repositories"
            )),
        ),
        // A url ending in `.git` names one repository: it must answer as one.
        None if source.repositories.is_empty() => (
            format!("{base}/info/refs?service=git-upload-pack"),
            base.ends_with(".git").then(|| {
                "no Git repository at the url: check sources[].url (a server root, or one repository's url)".to_string()
            }),
        ),
        None => (format!("{base}/"), None),
    }
}

/// What a Git source's `ok` row adds when no repository was named: whether its url is itself
/// a repository (it answered its refs as Git does) or a server root.
fn git_url_said(bridge: &str, source: &GitSource, said: &str) -> String {
    if source.repositories.is_empty() && said.contains(", a Git repository)") {
        format!(
            ": the url is one, cloned as /v1/bridges/{bridge}/git/{}",
            source.name
        )
    } else {
        "; the url answers no Git refs, so it is taken as a server root: name a repository without a glob in `repositories` and check fetches its refs".to_string()
    }
}

/// A real login to a database, as a session does: the row names the step that failed (DNS,
/// TCP, TLS, authentication, or the database missing).
async fn probe_database(db: &Database) -> Row {
    // DNS, TCP and TLS have 10 s each and the login 20 s: the probe allows them all.
    let result = match tokio::time::timeout(
        3 * PROBE_TIMEOUT + Duration::from_secs(20),
        postgres::login(db, &[]),
    )
    .await
    {
        Ok(Ok(session)) => {
            postgres::terminate(session).await;
            Ok(format!(
                "ok (logged in as {:?} to database {:?})",
                db.credentials.username, db.database
            ))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 50 s (DNS, TCP, TLS or login)".into()),
    };
    Row {
        kind: "database",
        name: db.name.clone(),
        target: format!("{}:{}/{}", db.host, db.port, db.database),
        result,
    }
}

async fn probe_all(cfg: &Config) -> Vec<Row> {
    let mut rows = vec![probe_cloud(cfg).await];
    for api in &cfg.apis {
        rows.push(probe_http("api", &api.name, api.url.to_string(), api, None).await);
    }
    for source in &cfg.sources {
        let (url, missing) = git_probe(source);
        let mut row = probe_http("git", &source.name, url, source, missing.as_deref()).await;
        let named = !source.repositories.is_empty() && missing.is_some();
        if let (false, Ok(said)) = (named, &mut row.result) {
            let more = git_url_said(&cfg.name, source, said);
            said.push_str(&more);
        }
        rows.push(row);
    }
    for registry in &cfg.registries {
        rows.push(Row {
            kind: "registry",
            name: registry.name.clone(),
            target: registry.url.to_string(),
            result: forward::check_registry(registry)
                .await
                .map_err(|e| format!("{e}{}", connect_hint(&e))),
        });
    }
    for db in &cfg.databases {
        rows.push(probe_database(db).await);
    }
    rows
}

/// Whether this process runs in a container (Docker, Podman, Kubernetes): there the health
/// port must listen on every interface for port mappings and probes to reach it.
fn in_container() -> bool {
    ["/.dockerenv", "/run/.containerenv"]
        .iter()
        .any(|f| std::path::Path::new(f).exists())
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// The warning for a health port reachable from other hosts where nothing needs it to be.
fn exposure_warning(address: std::net::IpAddr, port: u16, container: bool) -> Option<String> {
    (address.is_unspecified() && !container).then(|| {
        format!(
            "health_check_address {address} serves /health and /metrics on port {port} of every interface of this host; set health_check_address: 127.0.0.1 unless a monitoring system on another host scrapes it"
        )
    })
}

/// Runs the check; exit 0 when everything answered, 1 when something failed, 2 for a bad config.
pub fn check(path: Option<&Path>) -> ExitCode {
    let cfg = match crate::run::load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let runtime = match crate::run::runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // The files and directories it names, as `run` opens them (an audit log it can append to).
    let cfg = std::sync::Arc::new(cfg);
    // The audit file unlocked: checking the configuration of a running bridge is usual.
    if let Err(code) = crate::run::preflight(&cfg, false) {
        return code;
    }
    crate::say!("configuration: ok ({} resource(s))", cfg.resources().len());
    if let Some(warning) = crate::run::raise_fd_limit(cfg.max_connections) {
        crate::say!("warning: {warning}");
    }
    if let Some(warning) = crate::memory::limit_warning(cfg.max_memory_mb) {
        crate::say!("warning: {warning}");
    }
    for warning in cfg.warnings() {
        crate::say!("warning: {warning}");
    }
    if let Some(warning) = exposure_warning(
        cfg.health_check_address,
        cfg.health_check_port,
        in_container(),
    ) {
        crate::say!("warning: {warning}");
    }
    let rows = runtime.block_on(probe_all(&cfg));
    // Columns as wide as their longest cell: a Git source's target is a long URL.
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    let target_width = rows
        .iter()
        .map(|r| r.target.len())
        .max()
        .unwrap_or(0)
        .max(6);
    crate::say!(
        "{:<9} {:<name_width$} {:<target_width$} result",
        "kind",
        "name",
        "target"
    );
    let mut failed = 0;
    for row in rows {
        let result = match row.result {
            Ok(ok) => ok,
            Err(e) => {
                failed += 1;
                format!("FAILED: {e}")
            }
        };
        crate::say!(
            "{:<9} {:<name_width$} {:<target_width$} {result}",
            row.kind,
            row.name,
            row.target
        );
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_port_on_every_interface_is_warned_about_outside_containers() {
        let any: std::net::IpAddr = "0.0.0.0".parse().unwrap();
        let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        assert!(
            exposure_warning(any, 8080, false)
                .unwrap()
                .contains("127.0.0.1")
        );
        assert!(exposure_warning(any, 8080, true).is_none());
        assert!(exposure_warning(local, 8080, false).is_none());
        assert!(exposure_warning("::".parse().unwrap(), 8080, false).is_some());
    }

    #[test]
    fn a_repository_path_is_encoded_as_git_sends_it() {
        assert_eq!(path_encoded("team/with space.git"), "team/with%20space.git");
        assert_eq!(path_encoded("team/ünï.git"), "team/%C3%BCn%C3%AF.git");
        assert_eq!(
            path_encoded("team/with%20space.git"),
            "team/with%20space.git"
        );
        assert_eq!(path_encoded("plain/repo.git"), "plain/repo.git");
    }
}
