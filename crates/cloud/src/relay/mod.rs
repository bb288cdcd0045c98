//! The relay: bridges dial in ([`connect`]) after enrolling for a client certificate
//! ([`enroll`]); the [`Registry`] keeps every live tunnel per org and bridge; [`forward`] sends
//! API consumers' requests through them as HTTP/2 streams.
//!
//! The relay owns its routes and its [`RelayState`]; it shares only the store, the key cache
//! and the error type with the rest of `cloud`, never the API handlers.

pub mod connect;
pub mod enroll;
pub mod forward;
mod refusals;
pub mod registry;
mod severable;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get, post};
use tokio_util::sync::CancellationToken;
use tunnel::ResourceKind;

pub use forward::stream::{DatabaseStream, open_database};
pub use registry::{BridgeView, Instance, InstanceView, Registry};

use crate::auth::KeyCache;
use crate::metrics::Metrics;
use crate::storage::Store;
use crate::tls::LocalCa;

/// The resource kinds consumers reach under `/v1/bridges/{bridge}/{kind}/{name}/…`; each gets
/// the same three routes from [`router`].
pub const FORWARDED_KINDS: [ResourceKind; 2] = [ResourceKind::Api, ResourceKind::Git];

/// What the relay's handlers share (one pointer, cloned per request).
#[derive(Clone)]
pub struct RelayState(Arc<RelayShared>);

impl std::ops::Deref for RelayState {
    type Target = RelayShared;

    fn deref(&self) -> &RelayShared {
        &self.0
    }
}

/// The fields of [`RelayState`].
pub struct RelayShared {
    /// Bridge tokens, orgs and the CA live here.
    pub store: Store,
    /// Where retries are counted.
    pub metrics: Metrics,
    /// Verified API keys (shared with the Signals API).
    pub keys: Arc<KeyCache>,
    /// Signs bridges' client certificates.
    pub ca: LocalCa,
    /// Live tunnels.
    pub registry: Registry,
    /// Cancelled at shutdown; every tunnel's token is a child of it.
    pub shutdown: CancellationToken,
    /// How long a forwarded request waits for its response's headers, and the longest pause
    /// in its upload's progress or its response body (`--forward-timeout`).
    pub forward_timeout: Duration,
    /// The longest pause while a caller sends a request body (`--header-read-timeout`).
    pub read_timeout: Duration,
}

impl RelayState {
    /// The relay over `store`, signing with `ca`.
    pub fn new(
        store: Store,
        metrics: Metrics,
        keys: Arc<KeyCache>,
        ca: LocalCa,
        forward_timeout: Duration,
        read_timeout: Duration,
    ) -> Self {
        RelayState(Arc::new(RelayShared {
            store,
            metrics,
            keys,
            ca,
            registry: Registry::default(),
            shutdown: CancellationToken::new(),
            forward_timeout,
            read_timeout,
        }))
    }
}

/// The consumers' routes: `GET /v1/bridges`, for each of [`FORWARDED_KINDS`]
/// `ANY /v1/bridges/{bridge}/{kind}/{name}[/{path…}]`, and registries under `/v2/`.
pub fn router(state: RelayState) -> Router {
    let mut router = Router::new().route("/v1/bridges", get(forward::routes::list));
    for kind in FORWARDED_KINDS {
        let handler = match kind {
            ResourceKind::Git => any(forward::routes::forward_git),
            _ => any(forward::routes::forward_api),
        };
        for pattern in forwarded_routes(kind) {
            router = router.route(&pattern, handler.clone());
        }
    }
    // Any other segment where the kind goes: a 404 that names the right URL.
    router = router.route(
        "/v1/bridges/{bridge}/{kind}/{*path}",
        any(forward::routes::unknown_kind),
    );
    // Registries: the OCI distribution API lives at the root of a host.
    router = router
        .route("/v2", get(forward::routes::registry_base))
        .route("/v2/", get(forward::routes::registry_base))
        .route("/v2/{*path}", any(forward::routes::forward_registry));
    router.with_state(state)
}

/// The route patterns of a forwarded kind: the resource's root with and without its slash, and
/// every path under it. Forwarding reads the bridge, the resource and the rest of the path by
/// these patterns' segment names (`{bridge}`, `{name}`, `{*path}`).
fn forwarded_routes(kind: ResourceKind) -> [String; 3] {
    let base = format!("/v1/bridges/{{bridge}}/{}/{{name}}", kind.segment());
    [
        base.clone(),
        format!("{base}/"),
        format!("{base}/{{*path}}"),
    ]
}

/// The routes of the loopback listener through which the cloud is a Git client of its own
/// relay (a deployment's commits): the Git routes only, which there take only the process's
/// internal keys ([`crate::auth::KeyCache::authenticate_internal`]).
pub fn internal_router(state: RelayState) -> Router {
    let [.., under] = forwarded_routes(ResourceKind::Git);
    Router::new()
        .route(&under, any(forward::routes::forward_git))
        .layer(axum::Extension(crate::auth::InternalCaller))
        .with_state(state)
}

/// The bridges' routes (TLS listener only: tokens never travel in clear): enrollment and the
/// tunnel's upgrade.
pub fn tunnel_router(state: RelayState) -> Router {
    Router::new()
        .route(tunnel::ENROLL_PATH, post(enroll::enroll))
        .route(tunnel::CONNECT_PATH, get(connect::connect))
        .with_state(state)
}
