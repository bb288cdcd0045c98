//! The Signals API: ingestion, the event query API, probes and metrics. One [`router`] serves
//! both listeners; the app merges it with the relay's.
//!
//! Handlers stay thin: they authenticate ([`crate::auth`]), call the signals domain and the
//! store, and turn every failure into an RFC 9457 [`crate::problem::Problem`].

pub mod body;
pub mod budget;
pub mod events;
pub mod health;
pub mod idempotency;
pub mod ingest;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::auth::KeyCache;
use crate::metrics::Metrics;
use crate::signals::ratelimit::RateLimiter;
use crate::storage::Store;

/// What the API's handlers share: one pointer, so the per-request clones axum makes cost one
/// atomic increment rather than one per field.
#[derive(Clone)]
pub struct ApiState(Arc<Shared>);

impl std::ops::Deref for ApiState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`ApiState`].
pub struct Shared {
    /// The database.
    pub store: Store,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Verified-key cache (shared with the relay).
    pub keys: Arc<KeyCache>,
    /// Per-signal-key rate limit.
    pub limiter: RateLimiter,
    /// The longest pause allowed while a client sends a request body (`--header-read-timeout`).
    pub read_timeout: std::time::Duration,
    /// Signal request bodies being ingested (`--ingest-memory-mb`).
    pub ingest_budget: budget::IngestBudget,
    /// The bearer token `/metrics` asks for (`CLOUD_METRICS_TOKEN`); `None`: open to all.
    pub metrics_token: Option<crate::secrets::Hidden>,
}

impl ApiState {
    /// The API's state: `signal_rate_limit` events/s per signal key (0: none), at most
    /// `ingest_memory` bytes of bodies being ingested at once.
    pub fn new(
        store: Store,
        metrics: Metrics,
        keys: Arc<KeyCache>,
        signal_rate_limit: u32,
        ingest_memory: usize,
        read_timeout: std::time::Duration,
        metrics_token: Option<crate::secrets::Hidden>,
    ) -> Self {
        let ingest_budget = budget::IngestBudget::new(ingest_memory, metrics.ingest_bytes());
        ApiState(Arc::new(Shared {
            store,
            metrics,
            keys,
            limiter: RateLimiter::new(signal_rate_limit),
            read_timeout,
            ingest_budget,
            metrics_token,
        }))
    }
}

/// The API's routes (the same on both listeners).
pub fn router(state: ApiState) -> Router {
    let refuse_in_head = || axum::middleware::from_fn(crate::inputs::refuse_in_head);
    // A signal refused on its head alone is counted among the refused signals, as one the
    // handler refuses.
    let count = axum::middleware::from_fn_with_state(state.clone(), ingest::count_refused_in_head);
    Router::new()
        .route("/v1/events", get(events::list))
        .route("/v1/events/{id}", get(events::get))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .layer(refuse_in_head())
        .route(
            "/v1/signals/{signal_key}",
            post(ingest::post_signal)
                .layer(axum::middleware::from_fn(
                    crate::inputs::refuse_in_head_but_query,
                ))
                .layer(count),
        )
        .with_state(state)
}
