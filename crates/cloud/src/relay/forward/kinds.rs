//! What differs per resource kind on the cloud's side of forwarding: how a refusal reaches
//! the caller's client. API callers read problem+json; `git` prints a `text/plain` body as
//! `remote: …` lines and asks for credentials only after a `Basic` challenge.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tunnel::ResourceKind;

use crate::problem::Problem;

/// The refusal `problem` in the format the kind's clients show.
pub(super) fn refusal(kind: ResourceKind, problem: Problem) -> Response {
    match kind {
        ResourceKind::Git => git_refusal(problem),
        _ => problem.into_response(),
    }
}

fn git_refusal(problem: Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, format!("{}\n", problem.detail)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
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
