//! The consumers' routes of forwarding: each picks the [`Target`] its URL names, runs the
//! shared phases ([`run`]) and writes a refusal the way its kind's clients read one
//! ([`kinds`]).

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tunnel::ResourceKind;

use super::{Target, kinds, run};
use crate::problem::Problem;
use crate::relay::RelayState;

/// `GET /v1/bridges`: the org's connected bridges and their instances.
#[utoipa::path(get, path = "/v1/bridges", tag = "bridges",
    responses((status = 200, body = crate::openapi::Bridges),
        crate::openapi::ReadProblems))]
pub async fn list(
    State(state): State<RelayState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Json<serde_json::Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    Ok(Json(
        json!({"bridges": state.registry.list(principal.org_id)}),
    ))
}

/// `ANY /v1/bridges/{bridge}/apis/{name}/{path}`: an internal HTTP API through the bridge.
#[utoipa::path(method(get, post, put, delete, patch, head, options),
    path = "/v1/bridges/{bridge}/apis/{name}/{path}", tag = "bridges",
    params(("bridge" = String, Path), ("name" = String, Path, description = "The apis entry's name"),
        ("path" = String, Path, description = "The path inside the API (may hold slashes)")),
    responses((status = 200, description = "The internal API's answer, streamed"),
        (status = 400, description = "A path the bridge refuses (dot segments, encoded slashes, dots or percent signs) or that is no valid request target, or a request body that broke off or whose chunked framing is malformed", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No API key, or not a live one.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such bridge or resource", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "The tunnel or the internal system failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The bridge has no live tunnel", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "No answer within --forward-timeout", body = Problem, content_type = "application/problem+json")))]
pub async fn forward_api(
    State(state): State<RelayState>,
    matched: MatchedPath,
    req: Request,
) -> Response {
    forward(state, ResourceKind::Api, &matched, req).await
}

/// `GET|POST /v1/bridges/{bridge}/git/{source}/{path}`: Git's smart HTTP through the bridge.
#[utoipa::path(method(get, post), path = "/v1/bridges/{bridge}/git/{name}/{path}", tag = "bridges",
    params(("bridge" = String, Path), ("name" = String, Path, description = "The sources entry's name"),
        ("path" = String, Path, description = "The repository path and Git's service path")),
    responses((status = 200, description = "The Git server's answer, streamed"),
        (status = 400, description = "A path the bridge refuses (dot segments, encoded slashes, dots or percent signs)", content_type = "text/plain"),
        (status = 401, description = "No API key: a Basic challenge, so git asks for one", content_type = "text/plain"),
        (status = 403, description = "Refused at the bridge (push to a fetch-only source), or an API key sent as Bearer that is not valid", content_type = "text/plain"),
        (status = 404, description = "No such bridge, source or repository", content_type = "text/plain")))]
pub async fn forward_git(
    State(state): State<RelayState>,
    matched: MatchedPath,
    req: Request,
) -> Response {
    forward(state, ResourceKind::Git, &matched, req).await
}

/// `GET /v2/`: the registry API's base, which clients try first. With a valid API key (Basic,
/// any user, as `skopeo login` sends it; or Bearer) it answers 200; without, 401 and a `Basic`
/// challenge, so the client sends its login.
#[utoipa::path(get, path = "/v2/", tag = "registries",
    responses((status = 200, description = "The API key is valid: `{}` with `Docker-Distribution-API-Version: registry/2.0`"),
        (status = 401, description = "No or a wrong API key: an OCI error body and a `Basic` challenge", content_type = "application/json")))]
pub async fn registry_base(State(state): State<RelayState>, headers: HeaderMap) -> Response {
    match state.keys.authenticate(&state.store, &headers).await {
        Ok(_) => (
            [
                (tunnel::oci::API_VERSION_HEADER, tunnel::oci::API_VERSION),
                ("content-type", "application/json"),
            ],
            "{}",
        )
            .into_response(),
        Err(problem) => kinds::registry_refusal(problem),
    }
}

/// `GET|HEAD /v2/{bridge}/{registry}/{repository}/…`: a private registry through the bridge.
/// Clients address images as `CLOUD/{bridge}/{registry}/{repository}:{tag}`, so the first two
/// path components pick the bridge and its `registries` entry, and the rest is the registry's
/// own `/v2/{repository}/…`.
#[utoipa::path(method(get, head), path = "/v2/{bridge}/{registry}/{path}", tag = "registries",
    params(("bridge" = String, Path), ("registry" = String, Path, description = "The registries entry's name"),
        ("path" = String, Path, description = "The repository and the registry API's own path (manifests/…, blobs/…, tags/list)")),
    responses((status = 200, description = "The registry's answer, streamed"),
        (status = 401, description = "No API key: an OCI error body and a `Basic` challenge", content_type = "application/json"),
        (status = 403, description = "Refused at the bridge (not a pull): OCI `DENIED`", content_type = "application/json"),
        (status = 404, description = "No such bridge, registry or repository: OCI `NAME_UNKNOWN`", content_type = "application/json"),
        (status = 502, description = "The tunnel or the registry failed, or the registry refused the bridge's login", content_type = "application/json")))]
pub async fn forward_registry(
    State(state): State<RelayState>,
    matched: MatchedPath,
    req: Request,
) -> Response {
    // The image name as sent (still percent-encoded), after `/v2/`.
    let tail = Target::new(ResourceKind::Registry, matched.as_str(), req.uri().path()).rest;
    let path = tail.strip_prefix('/').unwrap_or(&tail);
    let mut parts = path.splitn(3, '/');
    let (Some(bridge), Some(name), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return no_image_name(path);
    };
    // The registry API's own words where the user's image name goes: `CLOUD/dc1/reg:1.0`
    // (no repository) asks for `/v2/dc1/reg/manifests/1.0`, and `CLOUD/dc1:1.0` for
    // `/v2/dc1/manifests/1.0`.
    let api_word = |s: &str| matches!(s, "manifests" | "blobs" | "tags");
    let segments: Vec<&str> = rest.split('/').collect();
    if api_word(name) || segments.iter().rposition(|s| api_word(s)) == Some(0) {
        return no_image_name(path);
    }
    let target = Target {
        kind: ResourceKind::Registry,
        bridge: bridge.to_string(),
        name: name.to_string(),
        rest: format!("/v2/{rest}"),
    };
    match run(&state, &target, req).await {
        Ok(mut response) => {
            kinds::registry_response_filter(bridge, name, &mut response);
            response
        }
        Err(problem) => kinds::registry_refusal(problem),
    }
}

/// The `404` (OCI `NAME_UNKNOWN`) for a registry path without a whole image name.
fn no_image_name(path: &str) -> Response {
    // The cloud has no catalog of its own: each registry's is under its entry.
    let catalog = if path == "_catalog" {
        "; each registry lists its repositories at /v2/BRIDGE/REGISTRY/_catalog"
    } else {
        ""
    };
    kinds::registry_refusal(Problem::not_found(format!(
        "no image name in {path:?}: an image is named CLOUD/BRIDGE/REGISTRY/REPOSITORY:TAG (the bridge's name, its registries entry, then the repository){catalog}"
    )))
}

/// `ANY /v1/bridges/{bridge}/{kind}/…` for a `kind` no route forwards: a 404 that says which
/// URL reaches what the caller meant. The likeliest slip is the bridge config's list name
/// (`sources`, `registries`) where the URL has the kind's own (`git`, or `/v2/` for images).
/// `text/plain` for git, which prints it as `remote: …`; problem+json for everyone else.
pub async fn unknown_kind(uri: axum::http::Uri, headers: HeaderMap) -> Response {
    // The segments as sent: the route matched them still percent-encoded, so the decoded text
    // could read as the very kind the caller is then told to use (and need not be UTF-8).
    let mut segments = uri.path().trim_start_matches("/v1/bridges/").split('/');
    let (bridge, kind) = (
        segments.next().unwrap_or_default(),
        segments.next().unwrap_or_default(),
    );
    let detail = match kind {
        _ if kind.contains('%') => format!(
            "the resource kind {kind:?} is percent-encoded, which no kind is: send it as plain text, as in /v1/bridges/BRIDGE/apis/{{name}}/… or /v1/bridges/BRIDGE/git/{{name}}/…"
        ),
        _ if bridge.contains('%') => format!(
            "the bridge name {bridge:?} is percent-encoded, which no bridge name is: send it as plain text, as in /v1/bridges/BRIDGE/apis/{{name}}/…"
        ),
        "sources" => format!(
            "a bridge's `sources` entries are reached at /v1/bridges/{bridge}/git/{{name}}/{{repository}}, not /sources/"
        ),
        "registries" => format!(
            "a bridge's `registries` entries are pulled as CLOUD/{bridge}/{{name}}/{{repository}}:{{tag}} (the registry API at /v2/{bridge}/{{name}}/…), not /v1/bridges/{bridge}/registries/"
        ),
        "databases" => format!(
            "a bridge's `databases` entries are reached with a PostgreSQL client on the cloud's TLS port, or with `cloud db-proxy` (GET /v1/bridges/{bridge}/databases/{{name}} and Upgrade: postgresql); there is no path under a database"
        ),
        _ => format!(
            "no resource kind {kind:?} in /v1/bridges/{bridge}/{kind}/…: internal APIs are at /v1/bridges/{bridge}/apis/{{name}}/…, Git sources at /v1/bridges/{bridge}/git/{{name}}/…"
        ),
    };
    let git = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("git/"));
    let kind = if git {
        ResourceKind::Git
    } else {
        ResourceKind::Api
    };
    kinds::refusal(kind, Problem::not_found(detail))
}

/// The handler of every forwarded route.
pub async fn forward(
    state: RelayState,
    kind: ResourceKind,
    matched: &MatchedPath,
    req: Request,
) -> Response {
    let target = Target::new(kind, matched.as_str(), req.uri().path());
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().get(..7))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer "));
    match run(&state, &target, req).await {
        Ok(mut response) => {
            if matches!(kind, ResourceKind::Api | ResourceKind::Git) {
                kinds::location_filter(kind, &target.bridge, &target.name, &mut response);
            }
            response
        }
        // git answers any 401 by asking for a user name and password, and prints nothing of
        // it: a key sent as a header (`http.extraHeader`) that is not valid is a 403, whose
        // words git prints as `remote: …`.
        Err(mut problem) if kind == ResourceKind::Git && problem.status == 401 && bearer => {
            problem.status = 403;
            problem.challenge = false;
            kinds::refusal(kind, problem)
        }
        Err(problem) => kinds::refusal(kind, problem),
    }
}
