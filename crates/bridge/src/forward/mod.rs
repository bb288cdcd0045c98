//! The HTTP/2 service the bridge runs for the cloud: every stream names one declared resource
//! (`/apis/{name}/{path}`); the bridge checks the path and the entry's `allow` rules, injects the
//! entry's credentials, streams the request to the internal system and the answer back, and
//! writes one audit record. Anything not declared is unreachable.

mod counted;
mod upstream;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tunnel::ResourceKind as WireKind;

pub use counted::{Counted, Tally};
pub use upstream::https_connector;
use upstream::{HOP, build_upstream, strip_headers};

use crate::audit::{AuditLog, AuditRecord, Decision};
use crate::config::{Config, ResourceKind};
use crate::memory::MemoryGauge;
use crate::metrics::Metrics;
use crate::rules::{allowed, method_is_forbidden, path_is_clean};
use crate::status::Status;

/// The response body type of the service.
pub type ResBody = BoxBody<Bytes, hyper::Error>;

/// How long a stream waits for a free slot under `max_connections` before a 503.
const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// Forwards the cloud's streams to declared resources.
pub struct Forwarder {
    cfg: Arc<Config>,
    status: Arc<Status>,
    metrics: Metrics,
    audit: Arc<AuditLog>,
    instance: String,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Counted<Arc<AtomicU64>>>,
    /// `max_connections`: streams of this instance, all resources together.
    all: Arc<Semaphore>,
    /// A resource's own `max_connections`, where it sets one.
    limits: HashMap<String, Arc<Semaphore>>,
    memory: MemoryGauge,
}

impl Forwarder {
    /// A forwarder over the configuration's `apis`.
    pub fn new(
        cfg: Arc<Config>,
        status: Arc<Status>,
        metrics: Metrics,
        audit: Arc<AuditLog>,
        instance: String,
    ) -> Self {
        let connector = https_connector();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        let all = Arc::new(Semaphore::new(cfg.max_connections.max(1) as usize));
        let limits = cfg
            .apis
            .iter()
            .filter_map(|a| {
                let n = a.max_connections?.max(1) as usize;
                Some((a.name.clone(), Arc::new(Semaphore::new(n))))
            })
            .collect();
        Forwarder {
            cfg,
            status,
            metrics,
            audit,
            instance,
            client,
            all,
            limits,
            memory: MemoryGauge::default(),
        }
    }

    /// Handles one stream from the cloud.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<ResBody>, hyper::Error> {
        if req.uri().path() == tunnel::HEARTBEAT_PATH {
            self.status.heartbeat();
            return Ok(text(StatusCode::OK, "ok"));
        }
        let started = Instant::now();
        // Every request the cloud sends counts, refused ones too (`bridge_refused_total` says why).
        self.metrics.requests.inc();
        let path = req.uri().path().to_string();
        let mut audit = AuditRecord {
            time: chrono::Utc::now(),
            request_id: header_str(req.headers(), tunnel::HEADER_REQUEST_ID),
            org: header_str(req.headers(), tunnel::HEADER_ORG),
            bridge: self.cfg.name.clone(),
            instance: self.instance.clone(),
            kind: ResourceKind::Api,
            resource: String::new(),
            method: req.method().to_string(),
            // Written without query values: the record's serializer strips them.
            path: req.uri().to_string(),
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0,
            principal: header_str(req.headers(), tunnel::HEADER_PRINCIPAL),
            decision: Decision::Denied,
            rule: String::new(),
        };
        let Some((kind, name, rest)) = tunnel::resource::split_tunnel_path(&path) else {
            return Ok(self.deny(
                started,
                audit,
                StatusCode::NOT_FOUND,
                "not_declared",
                "no such resource on this bridge",
            ));
        };
        audit.resource = name.to_string();
        let api = match kind {
            WireKind::Api => self.cfg.apis.iter().find(|a| a.name == name),
            _ => None,
        };
        let Some(api) = api else {
            return Ok(self.deny(
                started,
                audit,
                StatusCode::NOT_FOUND,
                "not_declared",
                "this bridge declares no such resource",
            ));
        };
        if !path_is_clean(rest) {
            audit.rule = "path-normalisation".into();
            return Ok(self.deny(
                started,
                audit,
                StatusCode::BAD_REQUEST,
                "not_allowed",
                "the path has '..', '.', encoded slashes, dots, semicolons or percent signs, or backslashes; send a normalised path",
            ));
        }
        if method_is_forbidden(req.method().as_str()) {
            audit.rule = "forbidden-method".into();
            return Ok(self.deny(
                started,
                audit,
                StatusCode::METHOD_NOT_ALLOWED,
                "not_allowed",
                "TRACE and CONNECT are never forwarded (TRACE would echo the injected credentials)",
            ));
        }
        match allowed(&api.allow, req.method().as_str(), rest) {
            Some(rule) => audit.rule = rule,
            None => {
                audit.rule = "no matching allow rule".into();
                return Ok(self.deny(
                    started,
                    audit,
                    StatusCode::FORBIDDEN,
                    "not_allowed",
                    "no allow rule of this resource matches the method and path",
                ));
            }
        }
        if self.memory.rss_mb() > self.cfg.max_memory_mb {
            tracing::warn!(
                limit_mb = self.cfg.max_memory_mb,
                "memory above max_memory_mb; refusing new streams"
            );
            audit.rule = "max_memory_mb".into();
            return Ok(self.deny(
                started,
                audit,
                StatusCode::SERVICE_UNAVAILABLE,
                "memory",
                "the bridge is above max_memory_mb; retry shortly",
            ));
        }
        let Some(permits) = self.permits(&api.name).await else {
            audit.rule = "max_connections".into();
            return Ok(self.deny(
                started,
                audit,
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "the bridge or this resource is at its max_connections; retry shortly",
            ));
        };
        let bytes_in = Arc::new(AtomicU64::new(0));
        let upstream = match build_upstream(api, rest, req, bytes_in.clone()) {
            Ok(r) => r,
            Err(why) => {
                return Ok(self.deny(started, audit, StatusCode::BAD_REQUEST, "not_allowed", &why));
            }
        };
        audit.decision = Decision::Allowed;
        // Until the internal system answers, a stream that goes away (the caller left, the
        // cloud's --forward-timeout, the tunnel dropped) is recorded as 499; `Finish` writes
        // the record and settles the metrics however the stream ends.
        audit.status = 499;
        self.metrics.in_flight.inc();
        let mut finish = Finish {
            forwarder: self.clone(),
            audit: Some(audit),
            started,
            bytes_in,
            bytes_out: 0,
            _permits: permits,
        };
        match self.client.request(upstream).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                strip_headers(&mut parts.headers, HOP);
                if let Some(audit) = finish.audit.as_mut() {
                    audit.status = parts.status.as_u16();
                }
                Ok(Response::from_parts(
                    parts,
                    Counted {
                        inner: body,
                        tally: finish,
                    }
                    .boxed(),
                ))
            }
            Err(e) => {
                tracing::warn!(resource = %api.name, cause = %e, "internal API unreachable");
                if let Some(audit) = finish.audit.as_mut() {
                    audit.status = 502;
                }
                drop(finish);
                Ok(text(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "the bridge cannot reach resource {:?}: {e}. Check that the bridge host can connect to it",
                        api.name
                    ),
                ))
            }
        }
    }

    /// A slot under `max_connections` and, where the resource sets one, under its own limit.
    /// A free slot is taken at once; otherwise the stream waits, up to [`QUEUE_WAIT`] in all.
    async fn permits(&self, resource: &str) -> Option<Permits> {
        let deadline = tokio::time::Instant::now() + QUEUE_WAIT;
        let take = |sem: Arc<Semaphore>| async move {
            match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => tokio::time::timeout_at(deadline, sem.acquire_owned())
                    .await
                    .ok()?
                    .ok(),
            }
        };
        // The resource's own limit first: streams queued for one busy resource must not sit
        // on instance-wide slots that other resources could use.
        let own = match self.limits.get(resource) {
            Some(sem) => Some(take(sem.clone()).await?),
            None => None,
        };
        let all = take(self.all.clone()).await?;
        Some(Permits {
            _all: all,
            _own: own,
        })
    }

    fn deny(
        &self,
        started: Instant,
        mut audit: AuditRecord,
        status: StatusCode,
        reason: &str,
        why: &str,
    ) -> Response<ResBody> {
        self.metrics.refuse(reason);
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        audit.status = status.as_u16();
        audit.decision = Decision::Denied;
        if audit.rule.is_empty() {
            audit.rule = reason.to_string();
        }
        self.write_audit(&audit);
        text(status, why)
    }

    fn write_audit(&self, record: &AuditRecord) {
        if let Err(e) = self.audit.write(record) {
            tracing::error!(cause = %e, "cannot write the audit record");
        }
    }
}

fn header_str(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn text(status: StatusCode, body: &str) -> Response<ResBody> {
    let mut r = Response::new(
        http_body_util::Full::new(Bytes::from(format!("{body}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // Busy (max_connections) or above max_memory_mb: both pass within moments.
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// Held for as long as a stream is forwarded.
struct Permits {
    _all: tokio::sync::OwnedSemaphorePermit,
    _own: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Writes the audit record and metrics when the response body ends (or is dropped).
struct Finish {
    forwarder: Arc<Forwarder>,
    audit: Option<AuditRecord>,
    started: Instant,
    bytes_in: Arc<AtomicU64>,
    bytes_out: u64,
    _permits: Permits,
}

impl Drop for Finish {
    fn drop(&mut self) {
        let f = &self.forwarder;
        f.metrics.in_flight.dec();
        f.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
        if let Some(mut audit) = self.audit.take() {
            audit.time = chrono::Utc::now();
            audit.bytes_in = self.bytes_in.load(Ordering::Relaxed);
            audit.bytes_out = self.bytes_out;
            audit.duration_ms = self.started.elapsed().as_millis() as u64;
            f.write_audit(&audit);
        }
    }
}

/// The response's bytes_out, written with the audit record.
impl Tally for Finish {
    fn add(&mut self, n: u64) {
        self.bytes_out += n;
    }
}
