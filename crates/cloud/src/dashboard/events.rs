//! Events: the org's timeline (newest first, filtered by type, service, environment and days, paged
//! by keyset so that a page costs the same at any depth) and one event's stored JSON.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::storage::{EventQuery, StoredEvent};

use super::DashboardState;
use super::extract::{Path, Query};
use super::me::Me;
use super::render::{message, page, unavailable, when_micros, when_text};

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

/// One suspect of an alert, as its page lists it.
struct SuspectRow {
    id: String,
    /// A deployment (which a person may confirm as the cause).
    deployment: bool,
    what: String,
    time: String,
    percent: i64,
    reasons: Vec<String>,
}

#[derive(Template)]
#[template(path = "dashboard/event.html")]
struct EventPage<'a> {
    me: &'a Me,
    id: &'a str,
    /// "Alert: Disk full", "Deployment: 1.4.2", or the type alone.
    heading: String,
    /// The fields a reader looks for first, by label: service, environment, status, ….
    facts: Vec<(&'static str, String)>,
    json: String,
    /// For an alert: its suspects (`None` when they could not be found).
    suspects: Option<Vec<SuspectRow>>,
    /// For an alert: the deployment confirmed as its cause.
    cause: Option<String>,
    /// For a deployment: the commits it brought, or why they cannot be shown.
    commits: Option<Result<Vec<CommitRow>, String>>,
}

/// One commit of a deployment, as its page lists it.
struct CommitRow {
    sha: String,
    subject: String,
    author: String,
    time: String,
    /// The first paths it changed, and how many more.
    files: String,
}

/// Paths shown per commit.
const FILES_SHOWN: usize = 5;

fn commit_rows(answer: &Value) -> Vec<CommitRow> {
    let list = answer["commits"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    list.iter()
        .map(|c| {
            let files: Vec<&str> = c["files"]
                .as_array()
                .map(|f| f.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut shown = files
                .iter()
                .take(FILES_SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if files.len() > FILES_SHOWN {
                shown.push_str(&format!(" and {} more", files.len() - FILES_SHOWN));
            }
            CommitRow {
                sha: text(c, "sha").chars().take(12).collect(),
                subject: text(c, "subject"),
                author: text(c, "author"),
                time: when_text(&text(c, "time")),
                files: shown,
            }
        })
        .collect()
}

fn suspect_rows(answer: &Value) -> Vec<SuspectRow> {
    answer["suspects"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| {
                    let e = &s["event"];
                    let what = [
                        text(e, "type"),
                        text(e, "service"),
                        text(e, "version"),
                        text(e, "summary"),
                    ]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" · ");
                    SuspectRow {
                        id: text(e, "id"),
                        deployment: text(e, "type") == "deployment",
                        what,
                        time: when_text(&text(e, "timestamp")),
                        percent: (s["score"].as_f64().unwrap_or(0.0) * 100.0).round() as i64,
                        reasons: s["reasons"]
                            .as_array()
                            .map(|r| {
                                r.iter()
                                    .filter_map(Value::as_str)
                                    .map(str::to_string)
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
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
fn summary_of(body: &Value) -> String {
    ["title", "version", "summary", "name"]
        .iter()
        .map(|f| text(body, f))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// The event page's heading: its type, capitalised, and what names it.
fn heading_of(body: &Value) -> String {
    let kind = text(body, "type");
    let mut chars = kind.chars();
    let kind = chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect::<String>())
        .unwrap_or_else(|| "Event".into());
    match summary_of(body) {
        s if s.is_empty() => kind,
        s => format!("{kind}: {s}"),
    }
}

/// The fields a reader of an event page looks for first, those the event has.
fn facts_of(body: &Value) -> Vec<(&'static str, String)> {
    [
        ("Service", "service"),
        ("Environment", "environment"),
        ("Status", "status"),
        ("Severity", "severity"),
        ("Version", "version"),
        ("Commit", "sha"),
        ("Repository", "repository"),
        ("Time", "timestamp"),
    ]
    .into_iter()
    .filter_map(|(label, field)| {
        let value = text(body, field);
        let value = if field == "timestamp" {
            when_text(&value)
        } else {
            value
        };
        (!value.is_empty()).then_some((label, value))
    })
    .collect()
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

/// `GET /events/{id}`: the event as stored, in the caller's org only.
pub async fn detail(
    State(state): State<DashboardState>,
    me: Me,
    Path(id): Path<String>,
) -> Response {
    match state.store.event(me.session.user.org_id, &id).await {
        Ok(Some(e)) => {
            let body: Value = serde_json::from_str(&e.body).unwrap_or(Value::Null);
            let json = serde_json::to_string_pretty(&body).unwrap_or(e.body.clone());
            let kind = text(&body, "type");
            let (suspects, cause) = if kind == "alert" {
                let Ok(cause) = state.store.cause_of(me.session.user.org_id, &e.id).await else {
                    return unavailable();
                };
                // The confirmed cause first, whatever its score.
                let suspects = (state.insight.suspects(me.session.user.org_id, &e.id).await)
                    .map(|answer| suspect_rows(&answer))
                    .map(|mut rows| {
                        rows.sort_by_key(|r| cause.as_deref() != Some(r.id.as_str()));
                        rows
                    });
                (suspects, cause)
            } else {
                (None, None)
            };
            let commits = if kind == "deployment" {
                let answer = state.insight.commits(me.session.user.org_id, &e.id).await;
                Some(answer.map(|a| commit_rows(&a)))
            } else {
                None
            };
            page(
                StatusCode::OK,
                &EventPage {
                    me: &me,
                    id: &e.id,
                    heading: heading_of(&body),
                    facts: facts_of(&body),
                    json,
                    suspects,
                    cause,
                    commits,
                },
            )
        }
        Ok(None) => message(
            StatusCode::NOT_FOUND,
            "No such event",
            "Your org has no event with this id.",
            "/events",
            "Back to events",
        ),
        Err(_) => unavailable(),
    }
}
