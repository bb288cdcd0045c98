//! Probes and metrics: `/livez` (the process runs), `/readyz` (storage answers), `/metrics`.

use axum::extract::State;
use axum::http::{StatusCode, header};
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

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "meta", security(()),
    responses((status = 200, body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
pub async fn metrics(State(state): State<ApiState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
