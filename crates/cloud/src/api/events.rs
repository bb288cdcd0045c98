//! `GET /v1/events` and `GET /v1/events/{id}`: an org reads back its own events.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiState;
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::signals::event::EventType;
use crate::storage::{EventQuery, StoredEvent};

/// Page size when `limit` is not given.
const DEFAULT_LIMIT: i64 = 100;
/// Largest page.
const MAX_LIMIT: i64 = 500;

/// Query string of `GET /v1/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(rename = "type")]
    kind: Option<String>,
    service: Option<String>,
    environment: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// The event as the API shows it: its body plus `id` and `receivedAt`. A stored body that does
/// not parse (ingestion refuses anything that would not) is an error in the log and, for
/// `GET /v1/events/{id}`, a 500; never an event silently missing its fields.
fn render(e: StoredEvent) -> Result<Value, Problem> {
    e.to_json().map_err(|cause| {
        tracing::error!(event = %e.id, cause = %cause, "a stored event's body does not parse");
        Problem::internal(format!(
            "event {:?} is stored but cannot be read ({cause}); the server's log has the details",
            e.id
        ))
    })
}

fn encode_cursor(e: &StoredEvent) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}|{}", e.occurred_at, e.id))
}

fn decode_cursor(cursor: &str) -> Result<(i64, String), Problem> {
    let bad = || {
        Problem::bad_request(
            "query parameter cursor is not one this API returned; use nextCursor as given",
        )
    };
    let text = URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(bad)?;
    let (at, id) = text.split_once('|').ok_or_else(bad)?;
    // Ids are UUIDs, stored hyphenated: anything else (a NUL, which PostgreSQL's text cannot
    // hold) was never handed out.
    let id = uuid::Uuid::try_parse(id).map_err(|_| bad())?;
    Ok((at.parse().map_err(|_| bad())?, id.hyphenated().to_string()))
}

/// Lists the org's events, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(("type" = Option<String>, Query, description = "deployment, alert, change or custom"),
        ("service" = Option<String>, Query), ("environment" = Option<String>, Query),
        ("since" = Option<String>, Query, description = "RFC 3339, inclusive"),
        ("until" = Option<String>, Query, description = "RFC 3339, exclusive"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "1 to 500, default 100"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page")),
    responses((status = 200, body = crate::openapi::EventPage),
        crate::openapi::ReadProblems))]
pub async fn list(
    State(state): State<ApiState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    let Query(mut p) = params.map_err(|e| {
        crate::query::query_problem(
            &e,
            &[
                "type",
                "service",
                "environment",
                "since",
                "until",
                "limit",
                "cursor",
            ],
        )
    })?;
    // Any case and blanks around, as at ingest; the stored name is the lower-case one.
    let kind = match &p.kind {
        None => None,
        Some(kind) => Some(EventType::parse(kind.trim()).map(|t| t.as_str().to_string()).ok_or_else(|| {
            Problem::bad_request(format!(
                "query parameter type={kind:?} is unknown; expected deployment, alert, change or custom"
            ))
        })?),
    };
    let limit = match &p.limit {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| {
                Problem::bad_request(format!(
                    "query parameter limit={l:?} must be a whole number from 1 to {MAX_LIMIT}"
                ))
            })?,
    };
    crate::query::trim_names(&mut p.service, &mut p.environment);
    crate::query::filter_params(p.service.as_deref(), p.environment.as_deref())?;
    let since = crate::query::time_param("since", p.since.as_deref())?;
    let until = crate::query::time_param("until", p.until.as_deref())?;
    crate::query::window(since, until)?;
    let query = EventQuery {
        since,
        until,
        after: p.cursor.as_deref().map(decode_cursor).transpose()?,
        kind,
        service: p.service,
        environment: p.environment,
        limit: limit + 1,
    };
    let mut rows = state
        .store
        .list_events(principal.org_id, &query)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more {
        rows.last().map(encode_cursor)
    } else {
        None
    };
    // A row that cannot be read never fails the page: it is listed on its own, by id, and the
    // rest is served.
    let mut events = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    for row in rows {
        let id = row.id.clone();
        match render(row) {
            Ok(event) => events.push(event),
            Err(problem) => unreadable.push(json!({"id": id, "detail": problem.detail})),
        }
    }
    let mut page = json!({"events": events, "nextCursor": next});
    if !unreadable.is_empty() {
        page["unreadable"] = Value::Array(unreadable);
    }
    Ok(Json(page))
}

/// One event of the org; 404 for another org's event (its existence is not revealed).
#[utoipa::path(get, path = "/v1/events/{id}", tag = "events",
    params(("id" = String, Path, description = "The event's id")),
    responses((status = 200, description = "The event as sent (normalised), with id and receivedAt", body = serde_json::Value),
        crate::openapi::ReadProblems,
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(state): State<ApiState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    let event = state
        .store
        .event(principal.org_id, &id)
        .await
        .map_err(|e| storage_unavailable(&e))?
        .ok_or_else(|| Problem::not_found(format!("no event {id:?} in this org")))?;
    Ok(Json(render(event)?))
}
