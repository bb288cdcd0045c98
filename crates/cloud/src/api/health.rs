//! Probes and metrics: `/livez` (the process runs), `/readyz` (storage answers), `/metrics`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ApiState;

/// 200 while the process runs.
#[utoipa::path(get, path = "/livez", tag = "meta", security(()), responses((status = 200, body = String, content_type = "text/plain")))]
pub async fn livez() -> &'static str {
    "ok\n"
}

/// 200 when storage answers, else 503 (take this instance out of rotation).
#[utoipa::path(get, path = "/readyz", tag = "meta", security(()),
    responses((status = 200, body = String, content_type = "text/plain"), (status = 503, body = String, content_type = "text/plain")))]
pub async fn readyz(State(state): State<ApiState>) -> Response {
    if state.store.ping().await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "storage unavailable\n").into_response()
    }
}

/// The metrics: OpenMetrics when the scraper asks for it (Prometheus does), else the
/// Prometheus text format. With `CLOUD_METRICS_TOKEN` set, only for that bearer token: the
/// figures count every org's events together, which a service whose orgs must not learn its
/// volume keeps from them.
#[utoipa::path(get, path = "/metrics", tag = "meta", security(()),
    responses((status = 200, description = "The Prometheus text format; OpenMetrics when `Accept` asks for it",
        body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 401, description = "CLOUD_METRICS_TOKEN is set and the request does not carry it as a bearer token",
        body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.metrics_token {
        // The scheme in any case, as for API keys (RFC 9110 11.1).
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        if !presented.is_some_and(|p| crate::secrets::same(p, &token.0)) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\"")],
                "/metrics needs the token this server was started with (CLOUD_METRICS_TOKEN) as a bearer token: Authorization: Bearer TOKEN\n",
            )
                .into_response();
        }
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, text) = tunnel::exposition::negotiate(accept, state.metrics.encode());
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}
