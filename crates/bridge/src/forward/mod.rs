//! The HTTP/2 service the bridge runs for the cloud: every stream names one declared resource
//! (`/{kind}/{name}/{path}`), and passes the same phases whatever its kind:
//!
//! 1. **route**: the stream's resource, or 404 (nothing undeclared is reachable);
//! 2. **admit**: path hygiene, forbidden methods, the kind's own rules and the entry's `allow`
//!    rules ([`Kind::admit`]), `max_memory_mb`, then a slot under `max_connections`;
//! 3. **upstream request**: the entry's base URL plus the path, hop-by-hop and spoofing
//!    headers removed, the kind's credentials injected ([`Kind::upstream_request_filter`]);
//! 4. **response**: the kind may replace the answer ([`Kind::response_filter`]); otherwise it
//!    streams back with one hop's headers removed, and any that echo the injected
//!    credentials ([`echo`]);
//! 5. **settle**: one audit record and the metrics, however the stream ends ([`Finish`]).
//!
//! The phases every kind shares live here (route, upstream request), in [`admit`],
//! [`respond`] and [`settle`]. Each HTTP kind is one module ([`api`], [`git`], [`registry`])
//! implementing [`Kind`]; databases ([`database`]) are byte streams that share the route,
//! admit and settle phases.

mod admit;
mod api;
mod batch;
mod causes;
mod counted;
mod database;
mod echo;
mod git;
mod kind;
mod registry;
mod respond;
mod settle;
mod upstream;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

pub(crate) use causes::{caller_advice, caller_summary, causes};
pub use counted::{Counted, Tally};
pub use database::audited;
pub use kind::{Kind, Refusal};
pub use registry::check_registry;
use settle::Finish;
use upstream::build_upstream;
pub use upstream::https_connector;

use crate::audit::{AuditLog, Decision};
use crate::config::{Config, ResourceKind};
use crate::memory::MemoryGauge;
use crate::metrics::Metrics;
use crate::status::Status;

/// The response body type of the service.
pub type ResBody = BoxBody<Bytes, hyper::Error>;

/// The kinds this release forwards; the bridge announces only these, and refuses to start
/// with an entry of another kind.
pub const SERVED_KINDS: [ResourceKind; 4] = [
    ResourceKind::Api,
    ResourceKind::Git,
    ResourceKind::Registry,
    ResourceKind::Database,
];

/// One declared entry, ready to forward to.
struct Resource {
    kind: Box<dyn Kind>,
    /// The entry's own `max_connections`, where it sets one.
    slots: Option<Arc<Semaphore>>,
    /// The client that reaches it: shared by every entry on the system roots, its own for an
    /// entry with a `tls_ca_file`.
    client: UpstreamClient,
    /// The forms of its injected credentials that its answers' headers must not carry back.
    echoes: echo::Echoes,
}

type UpstreamClient = Client<upstream::Connector, Counted<Arc<AtomicU64>>>;

fn upstream_client(tls_ca_file: Option<&std::path::Path>) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(https_connector(tls_ca_file))
}

/// Forwards the cloud's streams to declared resources.
pub struct Forwarder {
    cfg: Arc<Config>,
    status: Arc<Status>,
    metrics: Metrics,
    audit: Arc<AuditLog>,
    instance: String,
    /// `max_connections`: streams of this instance, all resources together.
    all: Arc<Semaphore>,
    resources: HashMap<(ResourceKind, String), Resource>,
    databases: HashMap<String, Arc<database::DatabaseEntry>>,
    /// Database sessions, which outlive the HTTP exchange that opened them.
    sessions: tokio_util::task::TaskTracker,
    /// Cancelled at shutdown: open database sessions end (and write their records).
    stop: tokio_util::sync::CancellationToken,
    memory: MemoryGauge,
}

impl Forwarder {
    /// A forwarder over the configuration's resources of [`SERVED_KINDS`].
    pub fn new(
        cfg: Arc<Config>,
        status: Arc<Status>,
        metrics: Metrics,
        audit: Arc<AuditLog>,
        instance: String,
    ) -> Self {
        let shared = upstream_client(None);
        let all = Arc::new(Semaphore::new(cfg.max_connections.max(1) as usize));
        let mut resources = HashMap::new();
        let entries = cfg
            .apis
            .iter()
            .map(|a| {
                (
                    ResourceKind::Api,
                    a.name.clone(),
                    Box::new(a.clone()) as Box<dyn Kind>,
                )
            })
            .chain(cfg.sources.iter().map(|s| {
                (
                    ResourceKind::Git,
                    s.name.clone(),
                    Box::new(s.clone()) as Box<dyn Kind>,
                )
            }))
            .chain(cfg.registries.iter().map(|r| {
                (
                    ResourceKind::Registry,
                    r.name.clone(),
                    Box::new(
                        registry::RegistryKind::new(r.clone()).among(&cfg.name, &cfg.registries),
                    ) as Box<dyn Kind>,
                )
            }));
        for (kind_of, name, kind) in entries {
            let slots = kind
                .max_connections()
                .map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
            let client = match kind.tls_ca_file() {
                Some(path) => upstream_client(Some(path)),
                None => shared.clone(),
            };
            let echoes = echo::Echoes::of(kind.injected().as_deref());
            resources.insert(
                (kind_of, name),
                Resource {
                    kind,
                    slots,
                    client,
                    echoes,
                },
            );
        }
        let databases = cfg
            .databases
            .iter()
            .map(|db| {
                let entry = database::DatabaseEntry {
                    db: db.clone(),
                    slots: db
                        .max_connections
                        .map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
                };
                (db.name.clone(), Arc::new(entry))
            })
            .collect();
        Forwarder {
            databases,
            sessions: tokio_util::task::TaskTracker::new(),
            stop: tokio_util::sync::CancellationToken::new(),
            cfg,
            status,
            metrics,
            audit,
            instance,
            all,
            resources,
            memory: MemoryGauge::default(),
        }
    }

    /// Ends the open database sessions (at shutdown: a session has no natural end to wait
    /// for) and refuses new ones; [`Forwarder::sessions_ended`] waits for their records.
    pub fn stop_sessions(&self) {
        self.stop.cancel();
        self.sessions.close();
    }

    /// Resolves once every database session has ended and written its audit record.
    pub async fn sessions_ended(&self) {
        self.sessions.wait().await;
    }

    /// Handles one stream from the cloud.
    pub async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
    ) -> Result<Response<ResBody>, hyper::Error> {
        if req.uri().path() == tunnel::HEARTBEAT_PATH {
            self.status.heartbeat();
            return Ok(kind::text(StatusCode::OK, "ok"));
        }
        if req.uri().path() == tunnel::REVOKED_PATH {
            let reason = req
                .headers()
                .get(tunnel::HEADER_REFUSAL)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("the bridge token was revoked");
            self.status.revoked(reason.to_string());
            return Ok(kind::text(StatusCode::OK, "ok"));
        }
        let started = Instant::now();
        // Every request the cloud sends counts, refused ones too (`bridge_refused_total` says why).
        self.metrics.requests.inc();
        let mut audit = self.audit_record(&req);
        // Phase 1: route.
        let path = req.uri().path().to_string();
        if let Some((ResourceKind::Database, name, rest)) =
            tunnel::resource::split_tunnel_path(&path)
        {
            audit.kind = ResourceKind::Database;
            audit.resource = name.to_string();
            let rest = rest.to_string();
            return Ok(self.database(req, started, audit, &rest).await);
        }
        let routed = tunnel::resource::split_tunnel_path(&path).and_then(|(kind, name, rest)| {
            audit.kind = kind;
            audit.resource = name.to_string();
            let resource = self.resources.get(&(kind, name.to_string()))?;
            Some((resource, rest))
        });
        let Some((resource, rest)) = routed else {
            let refusal =
                Refusal::not_found("not_declared", "this bridge declares no such resource");
            return Ok(self.deny(started, audit, None, refusal));
        };
        // What the query names, as the internal system knows it: every phase after this one
        // (checks, credentials, the upstream request) reads that.
        if let Some(query) = req.uri().query()
            && let std::borrow::Cow::Owned(local) = resource.kind.local_query(query)
        {
            let mut parts = req.uri().clone().into_parts();
            parts.path_and_query = format!("{path}?{local}").parse().ok();
            match http::Uri::from_parts(parts) {
                Ok(uri) => *req.uri_mut() = uri,
                Err(e) => {
                    tracing::warn!(resource = %audit.resource, cause = %e, "the query as the internal system knows it is no URI; passed as sent")
                }
            }
        }
        // Phase 2: admit. A stream may wait here for a slot, and in phase 3 for a registry's
        // token; if its caller leaves meanwhile, `Admitting` writes its record.
        let mut admitting = settle::Admitting::new(&self, audit, started);
        let (rule, permits) = match self.admit(resource, &req, rest).await {
            Ok(admitted) => admitted,
            Err(refusal) => {
                return Ok(self.deny(started, admitting.decided(), Some(resource), refusal));
            }
        };
        admitting.record().rule = rule;
        // Phase 3: the upstream request, with credentials the kind may first have to fetch (a
        // registry's token).
        let method = req.method().clone();
        let query = req.uri().query().map(str::to_string);
        let authorization = match resource
            .kind
            .authorize(&method, rest, query.as_deref())
            .await
        {
            Ok(value) => value,
            Err(refusal) => {
                return Ok(self.deny(started, admitting.decided(), Some(resource), refusal));
            }
        };
        let mut audit = admitting.decided();
        let bytes_in = Arc::new(AtomicU64::new(0));
        let upstream = match build_upstream(resource.kind.as_ref(), rest, req, bytes_in.clone()) {
            Ok(mut r) => {
                if let Some(value) = authorization {
                    r.headers_mut().insert(http::header::AUTHORIZATION, value);
                }
                r
            }
            Err(why) => {
                let refusal = Refusal {
                    status: StatusCode::BAD_REQUEST,
                    reason: "bad_path",
                    rule: audit.rule.clone(),
                    why,
                };
                return Ok(self.deny(started, audit, Some(resource), refusal));
            }
        };
        audit.decision = Decision::Allowed;
        // Until the internal system answers, a stream that goes away (the caller left, the
        // cloud's --forward-timeout, the tunnel dropped) is recorded as 499; `Finish` writes
        // the record and settles the metrics however the stream ends.
        audit.status = 499;
        self.metrics.in_flight.inc();
        let (kind, name) = (audit.kind, audit.resource.clone());
        let finish = Finish {
            forwarder: self.clone(),
            audit: Some(audit),
            started,
            bytes_in,
            bytes_out: 0,
            _permits: permits,
            streaming: false,
            whole: Default::default(),
        };
        // Phase 4: the response.
        let sent = kind::Sent {
            method,
            head: resource
                .kind
                .keeps_request()
                .then(|| (upstream.uri().clone(), upstream.headers().clone())),
        };
        let answer = match resource.client.request(upstream).await {
            Ok(response) => resource.kind.follow(&sent, response).await.map(Ok),
            Err(e) => Ok(Err(e)),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(refusal) => {
                return Ok(self.refused_answer(finish, resource, (kind, &name), refusal));
            }
        };
        Ok(self.respond(resource, &sent, finish, (kind, &name), answer))
    }
}

/// `host:port` of a URL (the port its scheme implies when it names none): what the bridge's
/// log names when an internal system cannot be reached, and no caller is told.
fn host_port(url: &url::Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// The caller's method: the stream's own, or the one the cloud names when HTTP/2 could not
/// carry it ([`tunnel::HEADER_METHOD`]).
fn method_of(req: &Request<Incoming>) -> &str {
    req.headers()
        .get(tunnel::HEADER_METHOD)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(req.method().as_str())
}

fn header_str(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}
