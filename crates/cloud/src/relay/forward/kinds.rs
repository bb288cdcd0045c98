//! What differs per resource kind on the cloud's side of forwarding: how a refusal reaches
//! the caller's client, and what of a registry's answer names its own paths. API callers read
//! problem+json; `git` prints a `text/plain` body as `remote: …` lines and asks for credentials
//! only after a `Basic` challenge; registry clients print the OCI error body's message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tunnel::ResourceKind;

use crate::problem::Problem;

/// The refusal `problem` in the format the kind's clients show.
pub(super) fn refusal(kind: ResourceKind, problem: Problem) -> Response {
    match kind {
        ResourceKind::Git => git_refusal(problem),
        ResourceKind::Registry => registry_refusal(problem),
        _ => problem.into_response(),
    }
}

/// An OCI error body, with the registry API's version header and, on a 401, the `Basic`
/// challenge after which `skopeo`, `podman` and `docker` send the login they were given.
pub(crate) fn registry_refusal(problem: Problem) -> Response {
    let body = tunnel::oci::error_body(problem.status, &problem.detail);
    let mut response = refusal_as(&problem, "application/json", body);
    response.headers_mut().insert(
        tunnel::oci::API_VERSION_HEADER,
        HeaderValue::from_static(tunnel::oci::API_VERSION),
    );
    response
}

/// A registry names its own paths in `Link` (the next page of a tag list) and `Location`:
/// `/v2/{repository}/…` there becomes `/v2/{bridge}/{registry}/{repository}/…` here, so the
/// client's next request comes back through the cloud.
pub(super) fn registry_response_filter(bridge: &str, registry: &str, response: &mut Response) {
    let prefix = format!("/v2/{bridge}/{registry}/");
    for name in [header::LINK, header::LOCATION] {
        let Some(value) = response.headers().get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let rewritten = value.replace("</v2/", &format!("<{prefix}")).replacen(
            "/v2/",
            &prefix,
            usize::from(value.starts_with("/v2/")),
        );
        if let Ok(v) = HeaderValue::from_str(&rewritten) {
            response.headers_mut().insert(name, v);
        }
    }
}

/// The bridge gives a redirect to an internal API's or Git server's own address as the
/// tunnel's path (`/apis/{name}/…`, `/git/{name}/…`): here it becomes
/// `/v1/bridges/{bridge}/apis/{name}/…` (or `/git/…`), so the client follows it back through
/// the cloud.
pub(super) fn location_filter(
    kind: ResourceKind,
    bridge: &str,
    name: &str,
    response: &mut Response,
) {
    let Some(location) = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let tunnel = format!("/{}/{name}", kind.segment());
    let Some(rest) = location.strip_prefix(&tunnel) else {
        return;
    };
    if !(rest.is_empty() || rest.starts_with(['/', '?', '#'])) {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/bridges/{bridge}{tunnel}{rest}")) {
        response.headers_mut().insert(header::LOCATION, v);
    }
}

fn git_refusal(problem: Problem) -> Response {
    let body = format!("{}\n", problem.detail);
    refusal_as(&problem, "text/plain; charset=utf-8", body)
}

/// `problem` as `body` of `content_type`, for clients that do not read problem+json, with the
/// `Basic` challenge after which they send credentials, and `Retry-After`.
fn refusal_as(problem: &Problem, content_type: &'static str, body: String) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if problem.challenge {
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"signals\""),
        );
    }
    if let Some(secs) = problem.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    response
}
