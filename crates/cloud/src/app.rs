//! The application: each feature (the Signals API, the bridge relay, the dashboard) owns its router and its
//! state; this module builds their states from the shared parts (store, metrics, key cache),
//! merges their routers, and adds what every route shares: the 404/405 answers, the refusal
//! of other sites' pages, and the per-route latency metric. No two features import each
//! other: the dashboard sees the relay and correlation only through [`crate::live`] and
//! [`crate::insight`], and uses `admin`'s key commands and `notify`'s webhook checks one way;
//! `pgwire` uses the relay's tunnels one way.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};

use crate::api::{self, ApiState};
use crate::auth::KeyCache;
use crate::dashboard::{self, DashboardParts, DashboardState};
use crate::insight::NoSuspects;
use crate::live::{LiveBridges, LiveInstance};
use crate::metrics::Metrics;
use crate::problem::Problem;
use crate::relay::{self, RelayState};
use crate::storage::Store;
use crate::tls::{LocalCa, OwnCa};

/// The service's limits, from the command line.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Events/s per signal key (0: none).
    pub signal_rate_limit: u32,
    /// Bytes of signal request bodies ingested at once.
    pub ingest_memory: usize,
    /// The longest pause in a request body.
    pub read_timeout: Duration,
    /// How long a forwarded request may wait for its response's headers.
    pub forward_timeout: Duration,
    /// The bearer token `/metrics` asks for (`CLOUD_METRICS_TOKEN`); `None`: open to all.
    pub metrics_token: Option<crate::secrets::Hidden>,
}

/// What the pages for people need from the command line.
#[derive(Debug, Clone)]
pub struct Publishing {
    /// The bridge release this cloud ships (`--bridge-release`).
    pub bridge_release: String,
    /// `--public-url`: the dashboard's address as people and bridges reach it.
    pub public_url: Option<String>,
    /// The TLS listener's port: the bridge commands a page shows dial it, even when the page
    /// was reached on the plain listener.
    pub tls_port: u16,
    /// The CA file clients must trust when the cloud serves a certificate of its own CA;
    /// `None` with `--tls-cert`, whose CA clients trust already.
    pub own_ca: Option<OwnCa>,
    /// `--webhook-allow-private`: the dashboard refuses a webhook at a non-public address at
    /// once, rather than letting every delivery fail.
    pub webhook_allow_private: bool,
}

/// Which listener a router serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: everything, including bridge enrollment and tunnels.
    Tls,
    /// `--http-listen`: the API only; bridge tokens never travel in clear.
    Plain,
}

/// The features' states, built once and shared by both listeners' routers.
#[derive(Clone)]
pub struct App {
    /// The Signals API.
    pub api: ApiState,
    /// The bridge relay (tunnels and forwarding).
    pub relay: RelayState,
    /// The dashboard (pages for people).
    pub dashboard: DashboardState,
    /// Correlation and DORA figures.
    pub correlation: crate::correlation::CorrelationState,
    /// The relay's live tunnels, for the features that are not the relay.
    pub live: Arc<dyn LiveBridges>,
    /// Correlation, for the features that are not correlation.
    pub insight: Arc<dyn crate::insight::Insight>,
    /// PostgreSQL sessions (the TLS port's front end and the upgrade route share it).
    pub pg: crate::pgwire::PgState,
    metrics: Metrics,
}

impl App {
    /// Every feature over one store, one metrics registry and one verified-key cache.
    pub fn new(
        store: Store,
        metrics: Metrics,
        ca: LocalCa,
        limits: Limits,
        publishing: Publishing,
        git: crate::correlation::mirror::GitClient,
    ) -> Self {
        let keys = Arc::new(KeyCache::default());
        let relay = RelayState::new(
            store.clone(),
            metrics.clone(),
            keys.clone(),
            ca,
            limits.forward_timeout,
            limits.read_timeout,
        );
        let live: Arc<dyn LiveBridges> = Arc::new(RelayBridges(relay.clone()));
        let correlation = crate::correlation::CorrelationState::new(
            store.clone(),
            keys.clone(),
            git,
            live.clone(),
        );
        let insight: Arc<dyn crate::insight::Insight> =
            Arc::new(CorrelationInsight(correlation.clone()));
        App {
            pg: crate::pgwire::PgState::new(relay.clone()),
            api: ApiState::new(
                store.clone(),
                metrics.clone(),
                keys.clone(),
                limits.signal_rate_limit,
                limits.ingest_memory,
                limits.read_timeout,
                limits.metrics_token,
            ),
            correlation,
            dashboard: DashboardState::new(DashboardParts {
                store,
                live: live.clone(),
                insight: insight.clone(),
                keys,
                release: publishing.bridge_release,
                public_url: publishing.public_url,
                tls_port: publishing.tls_port,
                own_ca: publishing.own_ca,
                webhook_allow_private: publishing.webhook_allow_private,
            }),
            live,
            insight,
            relay,
            metrics,
        }
    }

    /// The routes of the loopback listener through which this process is a Git client of its
    /// own relay (a deployment's commits): the relay's Git routes only.
    pub fn internal_router(&self) -> Router {
        relay::internal_router(self.relay.clone()).fallback(not_found)
    }

    /// The routes of one listener: the tunnel's handshake only on TLS.
    pub fn router(&self, listener: Listener) -> Router {
        // The routes whose handlers read small bodies whole: a paused body gets a 408.
        let whole =
            || middleware::from_fn_with_state(self.api.read_timeout, crate::stall::whole_body);
        let whole_inputs = |answer: crate::inputs::Answer| {
            middleware::from_fn_with_state(answer, crate::inputs::refuse_in_whole)
        };
        let mut app = api::router(self.api.clone())
            .merge(relay::router(self.relay.clone()))
            .merge(
                crate::correlation::router(self.correlation.clone())
                    .layer(whole_inputs(IntoResponse::into_response))
                    .layer(whole()),
            )
            .merge(crate::openapi::router())
            .merge(crate::pgwire::router(self.pg.clone()))
            .merge(
                dashboard::router(self.dashboard.over_tls(listener == Listener::Tls))
                    .layer(whole_inputs(dashboard::problem_page))
                    .layer(whole()),
            );
        if listener == Listener::Tls {
            app = app.merge(relay::tunnel_router(self.relay.clone()));
        }
        app.fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(crate::edge::EdgeLayer::new(self.metrics.clone()))
    }
}

/// Correlation as the dashboard and the notifier see it: wired here so that no feature
/// imports another.
struct CorrelationInsight(crate::correlation::CorrelationState);

/// How long a page waits for a deployment's commits before saying to come back.
const COMMITS_WAIT: Duration = Duration::from_secs(15);

impl crate::insight::Insight for CorrelationInsight {
    fn mapping_dropped(&self, org_id: i64, old: crate::storage::RepositorySource) {
        self.0.forget_unused_mirror(org_id, old);
    }

    fn commits<'a>(
        &'a self,
        org_id: i64,
        deployment_id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<serde_json::Value, String>> {
        let (state, id) = (self.0.clone(), deployment_id.to_string());
        Box::pin(async move {
            // Spawned, so that a fetch outliving the wait still finishes and is kept.
            let listing = tokio::spawn(async move {
                crate::correlation::commits::commits_of(&state, org_id, &id).await
            });
            match tokio::time::timeout(COMMITS_WAIT, listing).await {
                Ok(Ok(answer)) => answer.map_err(|p| p.detail),
                Ok(Err(_)) => Err("Listing the commits failed; reload the page to try again.".into()),
                Err(_) => Err("Listing the commits is taking a while (a first fetch of the repository); reload the page in a minute.".into()),
            }
        })
    }

    fn suspects<'a>(
        &'a self,
        org_id: i64,
        alert_id: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<serde_json::Value, NoSuspects>> {
        Box::pin(async move {
            crate::correlation::suspects_of(&self.0, org_id, alert_id)
                .await
                .map_err(|p| match p.status {
                    404 => NoSuspects::NotAnAlert,
                    _ => NoSuspects::Unavailable(p.detail),
                })
        })
    }

    fn weekly_dora<'a>(
        &'a self,
        org_id: i64,
        service: &'a str,
        environment: Option<&'a str>,
        weeks: u32,
    ) -> futures_util::future::BoxFuture<'a, Option<(Vec<serde_json::Value>, serde_json::Value)>>
    {
        Box::pin(async move {
            self.0
                .weekly_dora(org_id, service, environment, weeks)
                .await
                .ok()
        })
    }
}

/// The relay's live tunnels as the dashboard and the notifier see them: wired here so that no
/// feature imports another.
struct RelayBridges(RelayState);

impl LiveBridges for RelayBridges {
    fn instances(&self, org_id: i64) -> Vec<LiveInstance> {
        self.0
            .registry
            .list(org_id)
            .into_iter()
            .flat_map(|bridge| {
                bridge.instances.into_iter().map(move |i| LiveInstance {
                    bridge: bridge.name.clone(),
                    id: i.id,
                    version: i.version,
                    connected_at: i.connected_at,
                    last_heartbeat: i.last_heartbeat,
                    // Only a Git source keeps globs (the relay drops others' at connect).
                    git_repositories: (i.resources.iter())
                        .filter_map(|r| Some((r.name.clone(), r.repositories.clone()?)))
                        .collect(),
                    resources: i
                        .resources
                        .into_iter()
                        .map(|r| (r.kind.as_str(), r.name))
                        .collect(),
                })
            })
            .collect()
    }

    fn close(&self, org_id: i64, bridge: &str) {
        for instance in self.0.registry.instances(org_id, bridge) {
            let store = self.0.store.clone();
            tokio::spawn(async move { instance.close_revoked(&store).await });
        }
    }
}

/// 404: a page for a browser that asked for one off the API's paths, problem+json otherwise.
async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    let page_wanted = !path.starts_with("/v1/")
        && request
            .headers()
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/html"));
    if page_wanted {
        return crate::dashboard::not_found(path);
    }
    if matches!(path, "/v1/signals" | "/v1/signals/") {
        return Problem::not_found(
            "the URL has no signal key: events go to POST /v1/signals/{signal_key} (was the shell variable holding the key empty? `cloud signal-key create --org ORG` makes one)",
        )
        .into_response();
    }
    Problem::not_found(format!(
        "no route {} {}; see the API reference in docs/api.md",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// 405 as problem+json; axum adds the `Allow` header with the route's methods.
async fn method_not_allowed(request: Request) -> Response {
    Problem::method_not_allowed(format!(
        "{} is not allowed on {}; the Allow header lists the methods that are (see docs/api.md)",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}
