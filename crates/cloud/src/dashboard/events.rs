//! Events: the org's timeline (newest first, filtered by type, service, environment and days, paged
//! by keyset so that a page costs the same at any depth); one event's page is event_page.rs.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::storage::{EventQuery, StoredEvent};

use super::DashboardState;
use super::extract::Query;
use super::me::Me;
use super::render::{message, page, unavailable, when_micros};

/// Events per page.
const PAGE: i64 = 50;
/// The event types offered in the filter.
const TYPES: [&str; 4] = ["deployment", "alert", "change", "custom"];

struct Row {
    id: String,
    time: String,
    kind: String,
    service: String,
    environment: String,
    status: String,
    summary: String,
}

#[derive(Template)]
#[template(path = "dashboard/events.html")]
struct EventsPage<'a> {
    me: &'a Me,
    types: [&'static str; 4],
    filter_type: &'a str,
    filter_service: &'a str,
    filter_environment: &'a str,
    filter_from: &'a str,
    filter_to: &'a str,
    events: Vec<Row>,
    next: Option<String>,
    /// The newest page refreshes itself (new events appear); older pages stay put.
    live: bool,
}

/// The timeline's filters and position.
#[derive(Deserialize, Default)]
pub struct Filters {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    service: String,
    #[serde(default)]
    environment: String,
    /// From this day on (`YYYY-MM-DD`, UTC).
    #[serde(default)]
    from: String,
    /// Up to and including this day (`YYYY-MM-DD`, UTC).
    #[serde(default)]
    to: String,
    /// Older than this event (its time in µs and id), from the previous page's link; text, so
    /// that an edited one is said in this page's words, not the query parser's.
    #[serde(default)]
    before_at: String,
    #[serde(default)]
    before_id: String,
}

/// A string field of an event's stored JSON, empty when it has none.
pub(super) fn text(body: &Value, field: &str) -> String {
    body.get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// What names an event in a list or a heading: its title, version, summary or name.
pub(super) fn summary_of(body: &Value) -> String {
    ["title", "version", "summary", "name"]
        .iter()
        .map(|f| text(body, f))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

fn row(e: StoredEvent) -> Row {
    let body: Value = serde_json::from_str(&e.body).unwrap_or(Value::Null);
    let summary = summary_of(&body);
    Row {
        time: when_micros(e.occurred_at),
        kind: text(&body, "type"),
        service: text(&body, "service"),
        environment: text(&body, "environment"),
        status: text(&body, "status"),
        summary,
        id: e.id,
    }
}

/// The start of a `YYYY-MM-DD` day (UTC) in µs, `days` days later; `Err` names the field.
fn day(field: &str, value: &str, days: i64) -> Result<Option<i64>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    // chrono alone would take `2024-1-1`, `+2024-01-01` or a five-digit year too.
    let shaped = value.len() == 10
        && value.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    shaped
        .then(|| chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").ok())
        .flatten()
        .and_then(|d| d.checked_add_signed(chrono::Duration::days(days)))
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| Some(t.and_utc().timestamp_micros()))
        .ok_or_else(|| {
            format!("{field} {value:?} is not a date: expected YYYY-MM-DD, such as 2026-11-27.")
        })
}

fn some(s: &str) -> Option<String> {
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// `GET /events`.
pub async fn timeline(
    State(state): State<DashboardState>,
    me: Me,
    Query(f): Query<Filters>,
) -> Response {
    let kind = some(&f.kind)
        .map(|k| {
            crate::signals::event::EventType::parse(&k)
                .map(|t| t.as_str().to_string())
                .ok_or_else(|| {
                    format!("type {k:?} is not an event type: expected deployment, alert, change or custom.")
                })
        })
        .transpose();
    // The cursor comes whole from an "Older events" link: an edited or cut one is said, not
    // silently read as the first page.
    let before_at = some(&f.before_at).map(|at| at.parse::<i64>().map_err(drop));
    let after = match (before_at, some(&f.before_id)) {
        (None, None) => Ok(None),
        // Ids are stored hyphenated: another spelling of the same UUID is read as that.
        (Some(Ok(at)), Some(id)) if uuid::Uuid::try_parse(&id).is_ok() => {
            let id = uuid::Uuid::try_parse(&id).map_or(id, |u| u.hyphenated().to_string());
            Ok(Some((at, id)))
        }
        _ => Err("before_at and before_id come together from an \"Older events\" link, before_id an event's id: this link was edited or cut. Start again from the first page.".to_string()),
    };
    let refuse = |why: &str| {
        let back = "Back to events";
        message(
            StatusCode::BAD_REQUEST,
            "Filter not valid",
            why,
            "/events",
            back,
        )
    };
    let (since, until, kind, after) =
        match (day("from", &f.from, 0), day("to", &f.to, 1), kind, after) {
            (Ok(since), Ok(until), Ok(kind), Ok(after)) => (since, until, kind, after),
            (Err(why), ..) | (_, Err(why), ..) | (_, _, Err(why), _) | (.., Err(why)) => {
                return refuse(&why);
            }
        };
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return refuse(&format!(
            "from {:?} is after to {:?}: no day is in that window. Both days are included; swap them.",
            f.from.trim(),
            f.to.trim()
        ));
    }
    let query = EventQuery {
        kind,
        service: some(&f.service),
        environment: some(&f.environment),
        since,
        until,
        after,
        limit: PAGE + 1,
    };
    let Ok(mut found) = state
        .store
        .list_events(me.session.user.org_id, &query)
        .await
    else {
        return unavailable();
    };
    let more = found.len() as i64 > PAGE;
    found.truncate(PAGE as usize);
    let next = match found.last() {
        Some(last) if more => Some(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("type", &f.kind)
                .append_pair("service", &f.service)
                .append_pair("environment", &f.environment)
                .append_pair("from", &f.from)
                .append_pair("to", &f.to)
                .append_pair("before_at", &last.occurred_at.to_string())
                .append_pair("before_id", &last.id)
                .finish(),
        ),
        _ => None,
    };
    // The type is matched in any case (`Deployment`); the list shows it as it names it.
    let kind = f.kind.to_ascii_lowercase();
    page(
        StatusCode::OK,
        &EventsPage {
            me: &me,
            types: TYPES,
            filter_type: &kind,
            filter_service: &f.service,
            filter_environment: &f.environment,
            filter_from: &f.from,
            filter_to: &f.to,
            events: found.into_iter().map(row).collect(),
            next,
            live: f.before_at.trim().is_empty(),
        },
    )
}
