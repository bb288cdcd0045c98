//! Phase 2, admit: whether a stream may go on, and the slots it holds while it does. Every
//! kind passes it (databases call [`Forwarder::admit_stream`] directly).

use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use super::{Forwarder, Refusal, Resource, method_of};
use crate::rules::{method_is_forbidden, path_problem};

/// How long a stream waits for a free slot under `max_connections` before a 503.
const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// How a refused path's message starts: kinds that label errors by cause (OCI) read it.
pub(super) const PATH_REFUSAL: &str = "the path has ";

impl Forwarder {
    /// Phase 2: the rule that admits the stream and its slots, or why it is refused.
    pub(super) async fn admit(
        &self,
        resource: &Resource,
        req: &Request<Incoming>,
        path: &str,
    ) -> Result<(String, Permits), Refusal> {
        if let Some(what) = path_problem(path) {
            return Err(Refusal {
                status: StatusCode::BAD_REQUEST,
                reason: "bad_path",
                rule: "path-normalisation".into(),
                why: format!(
                    "{PATH_REFUSAL}{what}, which could lead out of the resource's base on some servers; send a normalised path without it"
                ),
            });
        }
        if method_is_forbidden(method_of(req)) {
            return Err(Refusal {
                status: StatusCode::METHOD_NOT_ALLOWED,
                reason: "not_allowed",
                rule: "forbidden-method".into(),
                why: "TRACE, TRACK and CONNECT are never forwarded (TRACE and TRACK would echo the injected credentials)".into(),
            });
        }
        let rule = resource.kind.admit(req.method(), path, req.uri().query())?;
        resource.kind.admit_headers(req.method(), req.headers())?;
        let permits = self.admit_stream(resource.slots.as_ref()).await?;
        Ok((rule, permits))
    }

    /// The admission every stream passes, whatever its kind: memory under `max_memory_mb`,
    /// then a slot under `max_connections` (and the resource's own `slots`).
    pub(super) async fn admit_stream(
        &self,
        slots: Option<&Arc<Semaphore>>,
    ) -> Result<Permits, Refusal> {
        if self.memory.rss_mb() > self.cfg.max_memory_mb {
            tracing::warn!(
                limit_mb = self.cfg.max_memory_mb,
                "memory above max_memory_mb; refusing new streams"
            );
            return Err(Refusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                reason: "memory",
                rule: "max_memory_mb".into(),
                why: "the bridge is above max_memory_mb; retry shortly".into(),
            });
        }
        self.permits(slots).await
    }

    /// A slot under `max_connections` and, where the resource sets one, under its own limit.
    /// A free slot is taken at once; otherwise the stream waits, up to [`QUEUE_WAIT`] in all,
    /// unless three times `max_connections` wait already: then it is refused at once, so that
    /// the tunnel's last stream slot stays free for the heartbeat.
    async fn permits(&self, slots: Option<&Arc<Semaphore>>) -> Result<Permits, Refusal> {
        let deadline = tokio::time::Instant::now() + QUEUE_WAIT;
        let most_waiting = i64::from(self.cfg.max_connections.max(1)).saturating_mul(3);
        let overloaded = |rule: &str, why: &str| Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            reason: "overloaded",
            rule: rule.into(),
            why: why.into(),
        };
        let take = |sem: Arc<Semaphore>| async move {
            if let Ok(p) = sem.clone().try_acquire_owned() {
                return Ok(p);
            }
            let Some(_waiting) = Waiting::join(&self.metrics.waiting, most_waiting) else {
                return Err(overloaded(
                    "max_connections (queue full)",
                    "three times max_connections streams already wait for a slot of this bridge; retry shortly",
                ));
            };
            match tokio::time::timeout_at(deadline, sem.acquire_owned()).await {
                Ok(Ok(permit)) => Ok(permit),
                _ => Err(overloaded(
                    "max_connections",
                    "the bridge or this resource is at its max_connections; retry shortly",
                )),
            }
        };
        // The resource's own limit first: streams queued for one busy resource must not sit
        // on instance-wide slots that other resources could use.
        let own = match slots {
            Some(sem) => Some(take(sem.clone()).await?),
            None => None,
        };
        let all = take(self.all.clone()).await?;
        Ok(Permits {
            _all: all,
            _own: own,
        })
    }
}

/// A place among the streams waiting for a slot, counted in `bridge_streams_waiting`.
struct Waiting<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> Waiting<'a> {
    /// Joins the waiting streams, unless `most` wait already.
    fn join(waiting: &'a prometheus_client::metrics::gauge::Gauge, most: i64) -> Option<Self> {
        if waiting.inc() >= most {
            waiting.dec();
            return None;
        }
        Some(Waiting(waiting))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Held for as long as a stream is forwarded.
pub(super) struct Permits {
    _all: tokio::sync::OwnedSemaphorePermit,
    _own: Option<tokio::sync::OwnedSemaphorePermit>,
}
