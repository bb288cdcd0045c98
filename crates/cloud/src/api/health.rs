//! Probes and metrics: `/livez` (the process runs), `/readyz` (storage answers), `/metrics`.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ApiState;

/// 200 while the process runs.
pub async fn livez() -> &'static str {
    "ok\n"
}

/// 200 when storage answers, else 503 (take this instance out of rotation).
pub async fn readyz(State(state): State<ApiState>) -> Response {
    if state.store.ping().await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "storage unavailable\n").into_response()
    }
}

/// Prometheus text exposition.
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
