//! Every Prometheus metric of `cloud`, defined once here and exposed on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of `signals_events_accepted_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    /// Event type.
    pub r#type: &'static str,
}

/// Labels of `signals_events_rejected_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why: `invalid`, `too_large`, `rate_limited`, `unauthorized`, …
    pub reason: &'static str,
}

/// Labels of `http_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// HTTP method (`other` for unusual ones, to keep cardinality bounded).
    pub method: &'static str,
    /// Matched route pattern (not the raw path, to keep cardinality bounded).
    pub route: String,
    /// Response status code.
    pub status: u16,
}

/// Labels of `relay_retries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabel {
    /// When the tunnel failed: `before_response` (no answer yet), `mid_response` (a held
    /// answer's body was cut), or `draining` (its bridge was shutting down and took no new
    /// stream; the request had not left the cloud).
    pub when: &'static str,
}

fn latency_histogram() -> Histogram {
    // 50 µs … ~26 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

/// Every reason a signal request is refused for: each series of `signals_events_rejected_total`
/// exists from the start, at 0, so that dashboards and alert rules see it before the first
/// refusal.
const REJECT_REASONS: [&str; 11] = [
    "unauthorized",
    "forbidden",
    "unknown_signal_key",
    "unsupported_media_type",
    "too_large",
    "malformed",
    "invalid",
    "rate_limited",
    "unavailable",
    "timeout",
    "overloaded",
];

/// The event types, in the order of [`Inner::accepted_by_type`].
const EVENT_TYPES: [&str; 4] = ["deployment", "alert", "change", "custom"];

struct Inner {
    registry: Registry,
    accepted: Family<TypeLabel, Counter>,
    /// `accepted` for each of [`EVENT_TYPES`], looked up once: counting an event is then one
    /// atomic add, not a lock and a hash.
    accepted_by_type: [Counter; 4],
    rejected: Family<ReasonLabel, Counter>,
    requests: Family<RouteLabels, Histogram, fn() -> Histogram>,
    commit: Histogram,
    commit_batches: Histogram,
    retries: Family<RetryLabel, Counter>,
    ingest_bytes: Gauge,
}

/// Handle to the metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let accepted = Family::<TypeLabel, Counter>::default();
        registry.register(
            "signals_events_accepted",
            "Events durably stored, by type",
            accepted.clone(),
        );
        let rejected = Family::<ReasonLabel, Counter>::default();
        for reason in REJECT_REASONS {
            let _ = rejected.get_or_create(&ReasonLabel { reason });
        }
        registry.register(
            "signals_events_rejected",
            "Signal requests refused, by reason",
            rejected.clone(),
        );
        let requests = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request, by method, route and status",
            requests.clone(),
        );
        let commit = latency_histogram();
        registry.register(
            "storage_commit_duration_seconds",
            "Time of one group commit (transaction + fsync)",
            commit.clone(),
        );
        let commit_batches = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register(
            "storage_commit_batches",
            "Requests sharing one group commit",
            commit_batches.clone(),
        );
        let retries = Family::<RetryLabel, Counter>::default();
        // Both series exist from the start, at 0, so that `rate()` and `absent()` alert rules
        // see a series before the first retry.
        for when in ["before_response", "mid_response", "draining"] {
            let _ = retries.get_or_create(&RetryLabel { when });
        }
        registry.register(
            "relay_retries",
            "Forwarded requests sent again to another bridge instance because their tunnel failed",
            retries.clone(),
        );
        let ingest_bytes = Gauge::default();
        registry.register(
            "signals_ingest_memory_bytes",
            "Bytes of signal request bodies being ingested now, out of --ingest-memory-mb",
            ingest_bytes.clone(),
        );
        let accepted_by_type =
            EVENT_TYPES.map(|t| accepted.get_or_create(&TypeLabel { r#type: t }).clone());
        Metrics(Arc::new(Inner {
            registry,
            accepted_by_type,
            accepted,
            rejected,
            requests,
            commit,
            commit_batches,
            retries,
            ingest_bytes,
        }))
    }

    /// Counts stored events of one type.
    pub fn accepted(&self, kind: &'static str, n: u64) {
        match EVENT_TYPES.iter().position(|t| *t == kind) {
            Some(i) => self.0.accepted_by_type[i].inc_by(n),
            None => self
                .0
                .accepted
                .get_or_create(&TypeLabel { r#type: kind })
                .inc_by(n),
        };
    }

    /// Counts a refused signal request (`reason` one of [`REJECT_REASONS`]).
    pub fn rejected(&self, reason: &'static str) {
        debug_assert!(
            REJECT_REASONS.contains(&reason),
            "{reason} is not in REJECT_REASONS"
        );
        self.0.rejected.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Records one answered HTTP request.
    pub fn request(&self, method: &'static str, route: String, status: u16, took: Duration) {
        self.0
            .requests
            .get_or_create(&RouteLabels {
                method,
                route,
                status,
            })
            .observe(took.as_secs_f64());
    }

    /// Records one group commit.
    pub fn observe_commit(&self, took: Duration, batches: usize) {
        self.0.commit.observe(took.as_secs_f64());
        self.0.commit_batches.observe(batches as f64);
    }

    /// Counts a forwarded request sent again to another instance (`when` its tunnel failed).
    pub fn relay_retry(&self, when: &'static str) {
        self.0.retries.get_or_create(&RetryLabel { when }).inc();
    }

    /// The gauge of signal body bytes being ingested, kept by the ingest budget.
    pub fn ingest_bytes(&self) -> Gauge {
        self.0.ingest_bytes.clone()
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0.registry);
        out
    }
}
