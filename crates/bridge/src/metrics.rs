//! The bridge's metrics, defined once: the five documented names and labels exactly, and extras
//! under `bridge_*` names.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of `service_bridge_connected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The bridge's name.
    pub name: String,
}

/// The reasons of `bridge_refused_total`, each a series from the start.
pub const REFUSAL_REASONS: [&str; 7] = [
    "not_declared",
    "not_allowed",
    "bad_path",
    "overloaded",
    "memory",
    "upstream_auth",
    "upstream_unavailable",
];

/// Label of `bridge_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// One of [`REFUSAL_REASONS`].
    pub reason: String,
}

/// Labels of `bridge_resource_up`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// api, git, registry or database.
    pub kind: String,
    /// The resource's name.
    pub name: String,
}

/// Handle to every metric; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    name: String,
    /// `service_bridge_connected{name}`: 1 while the tunnel is up.
    pub connected: Family<NameLabel, Gauge>,
    /// `service_bridge_requests_total`.
    pub requests: Counter,
    /// `service_bridge_request_duration_seconds`.
    pub duration: Histogram,
    /// `service_bridge_connection_errors_total`.
    pub connection_errors: Counter,
    /// `service_bridge_reconnections_total`.
    pub reconnections: Counter,
    /// `bridge_streams_in_flight`.
    pub in_flight: Gauge,
    /// `bridge_streams_waiting`: streams waiting for a slot under `max_connections`.
    pub waiting: Gauge,
    /// `bridge_refused_total{reason}`.
    pub refused: Family<ReasonLabel, Counter>,
    /// `bridge_resource_up{kind,name}`: 1 when the resource answered its last check.
    pub resource_up: Family<ResourceLabel, Gauge>,
}

impl Metrics {
    /// Registers every metric for bridge `name`.
    pub fn new(name: &str) -> Self {
        let mut registry = Registry::default();
        let connected = Family::<NameLabel, Gauge>::default();
        registry.register(
            "service_bridge_connected",
            "1 when the tunnel to the cloud is up",
            connected.clone(),
        );
        let requests = Counter::default();
        registry.register(
            "service_bridge_requests",
            "Requests forwarded from the cloud",
            requests.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.0005, 2.0, 18));
        registry.register(
            "service_bridge_request_duration_seconds",
            "Time to forward a request and stream its response",
            duration.clone(),
        );
        let connection_errors = Counter::default();
        registry.register(
            "service_bridge_connection_errors",
            "Failed attempts to connect to the cloud",
            connection_errors.clone(),
        );
        let reconnections = Counter::default();
        registry.register(
            "service_bridge_reconnections",
            "Tunnels re-established after a loss",
            reconnections.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "bridge_streams_in_flight",
            "Forwarded streams now open",
            in_flight.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "bridge_streams_waiting",
            "Streams waiting for a slot under max_connections (at most three times it)",
            waiting.clone(),
        );
        let refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "bridge_refused",
            "Requests refused by the bridge, by reason",
            refused.clone(),
        );
        let resource_up = Family::<ResourceLabel, Gauge>::default();
        registry.register(
            "bridge_resource_up",
            "1 when the declared resource answered its last reachability check (DNS and TCP)",
            resource_up.clone(),
        );
        connected
            .get_or_create(&NameLabel {
                name: name.to_string(),
            })
            .set(0);
        // Every documented reason has a series from the start, at 0, so that `rate()` and
        // `absent()` alert rules see one before the first refusal.
        for reason in REFUSAL_REASONS {
            let _ = refused.get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            });
        }
        Metrics {
            registry: Arc::new(registry),
            name: name.to_string(),
            connected,
            requests,
            duration,
            connection_errors,
            reconnections,
            in_flight,
            waiting,
            refused,
            resource_up,
        }
    }

    /// Sets `service_bridge_connected`.
    pub fn set_connected(&self, up: bool) {
        self.connected
            .get_or_create(&NameLabel {
                name: self.name.clone(),
            })
            .set(i64::from(up));
    }

    /// Counts a refusal.
    pub fn refuse(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
