//! `POST /v1/signals/{signalKey}`: authenticate, read the body within its limits, validate,
//! rate-limit, and answer `202` only once the group commit has the events on disk.

use std::borrow::Cow;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::body;
use super::budget::FIRST_SHARE;
use super::{ApiState, idempotency};
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::signals::batch::{self, BatchError, MAX_REQUEST_BYTES};
use crate::signals::event::{EventType, FieldError, ValidEvent, member_json};
use crate::signals::raw;
use crate::storage::{InsertOutcome, NewEvent, Store, WriteBatch};

/// `POST /v1/signals/{signalKey}`: 202 once stored, else a problem (400, 401, 403, 404, 413,
/// 415, 422, 429, 503; see docs/api.md).
#[utoipa::path(post, path = "/v1/signals/{signalKey}", tag = "signals",
    params(("signalKey" = String, Path, description = "The org's signal key"),
        ("Idempotency-Key" = Option<String>, Header, description = "A repeat with the same body returns the first answer")),
    request_body(content = serde_json::Value, content_type = "application/json",
        description = "One event object, or an array of up to 500 (docs/api.md lists the fields of each type)"),
    responses(
        (status = 202, description = "Stored durably: Accepted for one event, AcceptedBatch for an array", body = crate::openapi::AcceptedAnswer),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong API key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key is another org's", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown signal key", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body stopped arriving", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over 64 KiB per event or 1 MiB per request", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over the signal key's rate", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Storage unavailable or busy", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn post_signal(
    State(state): State<ApiState>,
    PathParams(signal_key): PathParams<String>,
    request: Request,
) -> Response {
    // The headers are borrowed from the request, not copied (axum's HeaderMap extractor clones).
    let (parts, body) = request.into_parts();
    match ingest(&state, &signal_key, &parts.headers, body).await {
        Ok(response) => response,
        Err((reason, problem)) => {
            state.metrics.rejected(reason);
            problem.into_response()
        }
    }
}

type Rejection = (&'static str, Problem);

/// Counts a signal that `inputs::refuse_in_head` refused before the handler ran (a
/// `Content-Encoding`, a NUL in the path) among `signals_events_rejected_total`, as the
/// handler counts its own refusals.
pub async fn count_refused_in_head(
    State(state): State<ApiState>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    if response
        .extensions()
        .get::<crate::inputs::RefusedInHead>()
        .is_some()
    {
        let reason = match response.status() {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid",
        };
        state.metrics.rejected(reason);
    }
    response
}

fn reject(reason: &'static str) -> impl FnOnce(Problem) -> Rejection {
    move |p| (reason, p)
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = value.split(';').next().unwrap_or("").trim();
    let ends_with = |suffix: &str| {
        mime.len() >= suffix.len()
            && mime.as_bytes()[mime.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    mime.eq_ignore_ascii_case("application/json")
        // application/SUBTYPE+json, SUBTYPE not empty.
        || (mime.len() > "application/+json".len()
            && mime.as_bytes()[..12].eq_ignore_ascii_case(b"application/")
            && ends_with("+json"))
}

/// What the request's head alone decides: who asks, whether the signal key is theirs, the
/// content type and the `Idempotency-Key`.
async fn admit(
    state: &ApiState,
    signal_key: &str,
    headers: &HeaderMap,
) -> Result<(crate::auth::Principal, Option<String>), Rejection> {
    let principal = state
        .keys
        .authenticate(&state.store, headers)
        .await
        .map_err(reject("unauthorized"))?;
    let owner = state
        .keys
        .signal_key_org(&state.store, signal_key)
        .await
        .map_err(reject("unavailable"))?
        .ok_or_else(|| match crate::secrets::named_kind(signal_key) {
            // A secret in the URL: named by its kind, never echoed.
            Some(other) if !signal_key.starts_with(crate::secrets::SIGNAL_KEY_PREFIX) => {
                Problem::not_found(format!(
                    "the URL holds {other}, not a signal key (sigkey_…): POST /v1/signals/{{signal key}} with the API key in Authorization; a secret that went into a URL may be in logs, so consider revoking it"
                ))
            }
            _ => Problem::not_found(format!(
                "no live signal key {signal_key:?} (unknown, or revoked); create one with `cloud signal-key create --org ORG`"
            )),
        })
        .map_err(reject("unknown_signal_key"))?;
    if owner != principal.org_id {
        return Err(reject("forbidden")(Problem::forbidden(
            "this API key belongs to another org than the signal key; use a key of the signal key's org",
        )));
    }
    if !is_json(headers) {
        let sent = headers
            .get(axum::http::header::CONTENT_TYPE)
            .map_or("no Content-Type".to_string(), |v| {
                format!("Content-Type {:?}", String::from_utf8_lossy(v.as_bytes()))
            });
        return Err(reject("unsupported_media_type")(
            Problem::unsupported_media(format!(
                "send the event as JSON with Content-Type: application/json (this request has {sent})"
            )),
        ));
    }
    let idempotency = idempotency::key(headers).map_err(reject("invalid"))?;
    Ok((principal, idempotency))
}

async fn ingest(
    state: &ApiState,
    signal_key: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Rejection> {
    let (principal, idempotency) = match admit(state, signal_key, headers).await {
        Ok(admitted) => admitted,
        Err(refused) => {
            // Read first, so that the client sees the refusal rather than a reset stream.
            crate::refused_body::drain_unread(headers, body).await;
            return Err(refused);
        }
    };
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES) {
        crate::refused_body::drain_unread(headers, body).await;
        return Err(body::too_large());
    }
    // Held until the answer: the body, its events and their commit are in memory till then.
    // It starts small and grows to the whole body once more than that arrives.
    let first = declared.unwrap_or(FIRST_SHARE).min(FIRST_SHARE);
    let Some(share) = state
        .ingest_budget
        .take(principal.org_id, first, state.read_timeout)
        .await
    else {
        // Read and dropped, so that a client still sending sees the 503.
        crate::refused_body::drain_unread(headers, body).await;
        return Err(body::overloaded());
    };
    let (bytes, _share) = body::read(
        body,
        &state.ingest_budget,
        share,
        declared,
        state.read_timeout,
    )
    .await?;
    // A repeat is answered from the first answer, once its body is known to be the same.
    let body_digest = idempotency::digest(&bytes);
    if let Some(key) = &idempotency {
        let first = state
            .store
            .idempotent_response(signal_key, key)
            .await
            .map_err(|e| ("unavailable", storage_unavailable(&e)))?;
        if let Some(first) = first {
            return idempotency::repeat(key, &first, &body_digest).map_err(reject("invalid"));
        }
    }
    // Millisecond precision, the server's one format for its times: what is stored, the
    // answer's `receivedAt` and a defaulted `timestamp` are the same instant, to the digit.
    let received =
        DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_default();
    let batch = batch::parse(&bytes, received).map_err(|e| match e {
        BatchError::Malformed(m) => (
            "malformed",
            Problem::bad_request(format!("the body is not valid JSON: {m}")),
        ),
        e @ BatchError::Unreadable { .. } => ("malformed", Problem::bad_request(e.to_string())),
        e @ BatchError::EventTooLarge { .. } => ("too_large", Problem::too_large(e.to_string())),
        BatchError::Invalid(errors) => ("invalid", Problem::invalid(errors)),
    })?;
    if let Err(wait) = state.limiter.check(signal_key, batch.events.len()) {
        let secs = wait.as_secs_f64().ceil() as u64;
        return Err(reject("rate_limited")(Problem::rate_limited(
            secs,
            format!(
                "signal key {signal_key:?} is over its rate limit; retry after {} s",
                secs.max(1)
            ),
        )));
    }
    let is_array = batch.is_array;
    let mut events = batch.events;
    inherit_resolves(state, principal.org_id, &mut events, is_array).await?;
    let new_events: Vec<NewEvent> = events
        .into_iter()
        .map(|e| to_new_event(&state.store, principal.org_id, e, received))
        .collect();
    // The events own their data now; the raw body need not wait for the commit with them.
    drop(bytes);
    let received_at = crate::time::format_millis(received);
    let answer = accepted_answer(is_array, &new_events, &received_at);
    let kinds: Vec<&'static str> = new_events.iter().map(|e| e.kind).collect();
    let outcome = state
        .store
        .insert(WriteBatch {
            org_id: principal.org_id,
            signal_key: signal_key.to_string(),
            idempotency: idempotency
                .as_ref()
                .map(|k| (k.clone(), idempotency::encode(&body_digest, &answer))),
            events: new_events,
        })
        .await
        .map_err(|e| ("unavailable", storage_unavailable(&e)))?;
    match outcome {
        InsertOutcome::Stored => {
            for kind in kinds {
                state.metrics.accepted(kind, 1);
            }
            Ok(json_response(StatusCode::ACCEPTED, answer))
        }
        // A concurrent request with the same key committed first.
        InsertOutcome::Duplicate(first) => {
            let key = idempotency.as_deref().unwrap_or_default();
            idempotency::repeat(key, &first, &body_digest).map_err(reject("invalid"))
        }
    }
}

fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// A resolve sent with only `dedupKey` takes the missing fields from the alert it closes: an
/// earlier alert of the same batch, else the latest stored one. Every resolve that has none
/// is named (by its index in an array), as the other field errors are.
async fn inherit_resolves(
    state: &ApiState,
    org_id: i64,
    events: &mut [ValidEvent<'_>],
    is_array: bool,
) -> Result<(), Rejection> {
    const INHERITED: [&str; 5] = ["service", "title", "severity", "environment", "source"];
    let mut orphans = Vec::new();
    for i in 0..events.len() {
        let Some(key) = events[i].inherit_from.clone() else {
            continue;
        };
        let (earlier, rest) = events.split_at_mut(i);
        let event = &mut rest[0];
        // Only an alert: other types keep unknown members, a `dedupKey` among them.
        let in_batch = earlier.iter().rev().find(|e| {
            e.kind == EventType::Alert
                && e.inherit_from.is_none()
                && e.get_str("dedupKey").as_deref() == Some(key.as_str())
        });
        if let Some(source) = in_batch {
            event.inherit(&INHERITED, |field| source.json_of(field));
            continue;
        }
        let stored = state
            .store
            .latest_alert(org_id, &key)
            .await
            .map_err(|e| ("unavailable", storage_unavailable(&e)))?;
        let members = stored.as_ref().and_then(|s| raw::members(&s.body).ok());
        let Some(members) = members else {
            let at = if is_array {
                format!("/{i}")
            } else {
                String::new()
            };
            orphans.push(FieldError {
                pointer: format!("{at}/dedupKey"),
                detail: format!(
                    "no earlier alert has dedupKey {key:?}; send service, title and severity with this resolve"
                ),
            });
            continue;
        };
        event.inherit(&INHERITED, |field| member_json(&members, field));
    }
    if orphans.is_empty() {
        Ok(())
    } else {
        Err(reject("invalid")(Problem::invalid(orphans)))
    }
}

fn to_new_event(
    store: &Store,
    org_id: i64,
    mut e: ValidEvent<'_>,
    received: DateTime<Utc>,
) -> NewEvent {
    e.default_time(received);
    let occurred = e.occurred_at.unwrap_or(received);
    let field = |k: &str| e.get_str(k).map(Cow::into_owned);
    let (id, seq) = store.new_event_id(org_id);
    NewEvent {
        id,
        seq,
        kind: e.kind.as_str(),
        service: field("service"),
        environment: field("environment"),
        status: field("status"),
        dedup_key: field("dedupKey"),
        occurred_at: occurred.timestamp_micros(),
        received_at: received.timestamp_micros(),
        body: e.body(),
    }
}

/// `{"id":…}` or `{"ids":[…]}`, `"status":"accepted"`, `"receivedAt":…`. Written directly:
/// ids are UUIDs and the time is RFC 3339, so nothing needs escaping.
fn accepted_answer(is_array: bool, events: &[NewEvent], received_at: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(80 + events.len() * 40);
    if is_array {
        out.push_str("{\"ids\":[");
        for (i, e) in events.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(out, "{comma}\"{}\"", e.id);
        }
        out.push(']');
    } else {
        let _ = write!(out, "{{\"id\":\"{}\"", events[0].id);
    }
    let _ = write!(
        out,
        ",\"status\":\"accepted\",\"receivedAt\":\"{received_at}\"}}"
    );
    out
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> NewEvent {
        NewEvent {
            id: id.into(),
            seq: None,
            kind: "custom",
            service: None,
            environment: None,
            status: None,
            dedup_key: None,
            occurred_at: 0,
            received_at: 0,
            body: "{}".into(),
        }
    }

    #[test]
    fn json_content_types_are_recognised_in_any_case() {
        let with = |value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/vnd.acme+json"));
        assert!(with("APPLICATION/PROBLEM+JSON"));
        assert!(!with("text/json"));
        assert!(!with("application/jsonx"));
        assert!(!with("application/+json"));
        assert!(!with("text/plain"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn the_accepted_answer_is_json_with_the_ids() {
        use serde_json::Value;
        let at = "2024-01-15T10:30:00.5Z";
        let one: Value = serde_json::from_str(&accepted_answer(false, &[event("a")], at)).unwrap();
        assert_eq!(
            one,
            serde_json::json!({"id": "a", "status": "accepted", "receivedAt": at})
        );
        let many: Value =
            serde_json::from_str(&accepted_answer(true, &[event("a"), event("b")], at)).unwrap();
        assert_eq!(
            many,
            serde_json::json!({"ids": ["a", "b"], "status": "accepted", "receivedAt": at})
        );
    }
}
