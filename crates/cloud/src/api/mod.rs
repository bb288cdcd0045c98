//! The HTTP API: one [`router`] serves both listeners (TLS and plain HTTP).
//!
//! Handlers stay thin: they authenticate ([`auth`]), call the signals domain and the store, and
//! turn every failure into an RFC 9457 [`problem::Problem`].

pub mod auth;
pub mod budget;
pub mod events;
pub mod health;
pub mod ingest;
pub mod problem;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::relay::{self, Registry};
use crate::signals::ratelimit::RateLimiter;
use crate::storage::Store;
use crate::tls::LocalCa;

/// What every handler shares: one pointer, so the per-request clones axum makes cost one
/// atomic increment rather than one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// The database.
    pub store: Store,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Verified-key cache.
    pub keys: Arc<auth::KeyCache>,
    /// Per-signal-key rate limit.
    pub limiter: Arc<RateLimiter>,
    /// Bridge tunnels.
    pub relay: Arc<RelayState>,
    /// The longest pause allowed while a client sends a request body (`--header-read-timeout`).
    pub read_timeout: std::time::Duration,
    /// Signal request bodies being ingested (`--ingest-memory-mb`).
    pub ingest_budget: budget::IngestBudget,
}

/// The service's limits, from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Events/s per signal key (0: none).
    pub signal_rate_limit: u32,
    /// Bytes of signal request bodies ingested at once.
    pub ingest_memory: usize,
    /// The longest pause in a request body.
    pub read_timeout: std::time::Duration,
    /// How long a forwarded request may wait for its response's headers.
    pub forward_timeout: std::time::Duration,
}

/// What the bridge relay shares.
pub struct RelayState {
    /// Signs bridges' client certificates.
    pub ca: LocalCa,
    /// Live tunnels.
    pub registry: Registry,
    /// Cancelled at shutdown; every tunnel's token is a child of it.
    pub shutdown: CancellationToken,
    /// How long a forwarded request waits for its response's headers, and the longest pause
    /// in its upload's progress or its response body (`--forward-timeout`).
    pub forward_timeout: std::time::Duration,
}

impl AppState {
    /// State over a store and the internal CA, within `limits`.
    pub fn new(store: Store, metrics: Metrics, ca: LocalCa, limits: Limits) -> Self {
        AppState(Arc::new(Shared {
            store,
            metrics,
            keys: Arc::new(auth::KeyCache::default()),
            limiter: Arc::new(RateLimiter::new(limits.signal_rate_limit)),
            relay: Arc::new(RelayState {
                ca,
                registry: Registry::default(),
                shutdown: CancellationToken::new(),
                forward_timeout: limits.forward_timeout,
            }),
            read_timeout: limits.read_timeout,
            ingest_budget: budget::IngestBudget::new(limits.ingest_memory),
        }))
    }
}

/// Which listener a router serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: everything, including bridge enrollment and tunnels.
    Tls,
    /// `--http-listen`: the API only; bridge tokens never travel in clear.
    Plain,
}

/// The API's routes for one listener.
pub fn router(state: AppState, listener: Listener) -> Router {
    let routes = Router::new();
    let routes = match listener {
        Listener::Tls => routes
            .route(tunnel::ENROLL_PATH, post(relay::enroll::enroll))
            .route(tunnel::CONNECT_PATH, get(relay::connect::connect)),
        Listener::Plain => routes,
    };
    routes
        .route("/v1/signals/{signal_key}", post(ingest::post_signal))
        .route("/v1/events", get(events::list))
        .route("/v1/events/{id}", get(events::get))
        .route("/v1/bridges", get(relay::forward::list))
        .route(
            "/v1/bridges/{bridge}/apis/{api}",
            any(relay::forward::api_root),
        )
        .route(
            "/v1/bridges/{bridge}/apis/{api}/",
            any(relay::forward::api_root),
        )
        .route(
            "/v1/bridges/{bridge}/apis/{api}/{*path}",
            any(relay::forward::api_path),
        )
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    problem::Problem::not_found(format!(
        "no route {} {}; see the API reference in docs/api.md",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// 405 as problem+json; axum adds the `Allow` header with the route's methods.
async fn method_not_allowed(request: Request) -> Response {
    problem::Problem::method_not_allowed(format!(
        "{} is not allowed on {}; the Allow header lists the methods that are (see docs/api.md)",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// Records each request's latency by route.
async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = match request.method().as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        // Unbounded label values would grow the metrics without limit.
        _ => "other",
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    state
        .metrics
        .request(method, route, response.status().as_u16(), started.elapsed());
    response
}
