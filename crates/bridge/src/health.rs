//! The operator's port (`health_check_port`): `/livez` (the process runs), `/health`
//! (readiness: the JSON of docs/bridge.md, 503 when unhealthy) and `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::status::Status;

#[derive(Clone)]
struct HealthState {
    status: Arc<Status>,
    metrics: Metrics,
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn health(State(s): State<HealthState>) -> Response {
    let h = s.status.health();
    let code = if h.status == "unhealthy" {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(h)).into_response()
}

async fn metrics_text(State(s): State<HealthState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

/// Serves the three endpoints until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    status: Arc<Status>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .with_state(HealthState { status, metrics });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(addr = %addr, "health endpoint listening");
    }
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
}
