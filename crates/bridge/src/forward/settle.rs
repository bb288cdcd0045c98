//! Phase 5, settle: the stream's audit record and metrics, written once however it ends:
//! refused before it reached the internal system ([`Forwarder::deny`]), left by its caller
//! while it waited to be admitted ([`Admitting`]), refused on the internal system's answer
//! ([`Forwarder::refused_answer`]), or when the answer's body ends or is dropped ([`Finish`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;

use super::admit::Permits;
use super::{Forwarder, Refusal, ResBody, Resource, Tally, header_str, kind, method_of};
use crate::audit::{AuditRecord, Decision};
use crate::config::ResourceKind;

/// A stream's record until it is forwarded (it may wait for a slot up to 5 s, then for a
/// registry's token): when the caller leaves meanwhile, the stream is dropped here, and the
/// record says so (499).
pub(super) struct Admitting<'a> {
    forwarder: &'a Forwarder,
    audit: Option<AuditRecord>,
    started: Instant,
}

impl<'a> Admitting<'a> {
    /// Holds `audit` while the stream is admitted.
    pub(super) fn new(forwarder: &'a Forwarder, audit: AuditRecord, started: Instant) -> Self {
        Admitting {
            forwarder,
            audit: Some(audit),
            started,
        }
    }

    /// The record, to fill in while it is held.
    pub(super) fn record(&mut self) -> &mut AuditRecord {
        // Held from `new` until `decided` or the drop, which both take `self`.
        self.audit
            .as_mut()
            .expect("the record is held until admission decides")
    }

    /// The record back, once admission has decided.
    pub(super) fn decided(mut self) -> AuditRecord {
        // Held from `new` until here or the drop: only one of the two takes it.
        self.audit
            .take()
            .expect("the record is held until admission decides")
    }
}

impl Drop for Admitting<'_> {
    fn drop(&mut self) {
        let Some(mut audit) = self.audit.take() else {
            return;
        };
        let f = self.forwarder;
        f.metrics
            .duration
            .observe(self.started.elapsed().as_secs_f64());
        audit.status = 499;
        audit.duration_ms = self.started.elapsed().as_millis() as u64;
        audit.rule = "the caller left before the stream was forwarded".into();
        f.write_audit(&audit);
    }
}

impl Forwarder {
    /// The audit record of a stream, before anything is decided.
    pub(super) fn audit_record(&self, req: &Request<Incoming>) -> AuditRecord {
        let method = method_of(req).to_string();
        AuditRecord {
            time: chrono::Utc::now(),
            request_id: header_str(req.headers(), tunnel::HEADER_REQUEST_ID),
            org: header_str(req.headers(), tunnel::HEADER_ORG),
            bridge: self.cfg.name.clone(),
            instance: self.instance.clone(),
            kind: ResourceKind::Api,
            resource: String::new(),
            method,
            // The path and query only (a stream the cloud opens with a full URI, as a database
            // session's is, names the same path), written without query values: the record's
            // serializer strips them.
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().path().to_string(), ToString::to_string),
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0,
            principal: header_str(req.headers(), tunnel::HEADER_PRINCIPAL),
            decision: Decision::Denied,
            rule: String::new(),
            event: None,
            ended: None,
            statement: None,
        }
    }

    /// The internal system answered, but not with what may go back (it refused the bridge's
    /// credentials, or redirected where the bridge does not follow): the kind's refusal
    /// instead, counted, logged and audited with the rule that decided.
    pub(super) fn refused_answer(
        &self,
        mut finish: Finish,
        resource: &Resource,
        (kind, name): (ResourceKind, &str),
        refusal: Refusal,
    ) -> Response<ResBody> {
        tracing::warn!(kind = %kind, resource = %name, status = refusal.status.as_u16(), why = %refusal.why, "internal resource's answer refused");
        self.metrics.refuse(refusal.reason);
        if let Some(audit) = finish.audit.as_mut() {
            audit.status = refusal.status.as_u16();
            audit.rule = refusal.rule;
        }
        drop(finish);
        resource.kind.refusal(refusal.status, &refusal.why)
    }

    /// Settles a refused stream: metrics, the audit record, and the refusal in the kind's
    /// format (problem+json where no resource was found).
    pub(super) fn deny(
        &self,
        started: Instant,
        mut audit: AuditRecord,
        resource: Option<&Resource>,
        refusal: Refusal,
    ) -> Response<ResBody> {
        self.metrics.refuse(refusal.reason);
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        audit.status = refusal.status.as_u16();
        // A refusal after waiting for a slot took that long.
        audit.duration_ms = started.elapsed().as_millis() as u64;
        audit.decision = Decision::Denied;
        audit.rule = if refusal.rule.is_empty() {
            refusal.reason.to_string()
        } else {
            refusal.rule
        };
        self.write_audit(&audit);
        match resource {
            Some(r) => r.kind.refusal(refusal.status, &refusal.why),
            None => kind::problem(refusal.status, &refusal.why),
        }
    }

    /// Appends a record to the audit log; a failure is logged, never passed to the caller.
    pub(super) fn write_audit(&self, record: &AuditRecord) {
        tracing::debug!(
            event = record.event.as_deref().unwrap_or("request"),
            request_id = %record.request_id,
            kind = %record.kind,
            resource = %record.resource,
            method = %record.method,
            path = %crate::audit::strip_query_values(&record.path),
            status = record.status,
            decision = record.decision.as_str(),
            rule = %record.rule,
            duration_ms = record.duration_ms,
            "request settled"
        );
        if let Err(e) = self.audit.write(record) {
            tracing::error!(cause = %e, "cannot write the audit record");
        }
    }
}

/// Phase 5: writes the audit record and metrics when the response body ends (or is dropped).
pub(super) struct Finish {
    pub(super) forwarder: Arc<Forwarder>,
    /// Taken when written: `None` once the record is out.
    pub(super) audit: Option<AuditRecord>,
    pub(super) started: Instant,
    pub(super) bytes_in: Arc<AtomicU64>,
    pub(super) bytes_out: u64,
    pub(super) _permits: Permits,
    /// The answer's body is streaming back (set as it starts); a body that does not reach its
    /// end, [`Finish::whole`], is recorded with `ended: "cut"`.
    pub(super) streaming: bool,
    pub(super) whole: std::sync::atomic::AtomicBool,
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
            if self.streaming && !self.whole.load(Ordering::Relaxed) {
                audit.ended = Some("cut".into());
            }
            f.write_audit(&audit);
        }
    }
}

/// The response's bytes_out, written with the audit record.
impl Tally for Finish {
    fn add(&mut self, n: u64) {
        self.bytes_out += n;
    }

    fn ended(&self) {
        self.whole.store(true, Ordering::Relaxed);
    }
}
