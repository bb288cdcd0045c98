//! One event's page (`GET /events/{id}`): a heading of its type and title, the fields a
//! reader looks for first, an alert's suspects and confirmed cause, a deployment's commits,
//! and the stored JSON.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::DashboardState;
use super::events::{summary_of, text};
use super::extract::Path;
use super::me::Me;
use super::render::{message, page, unavailable, when_text};
use crate::insight::NoSuspects;

/// One suspect of an alert, as its page lists it.
struct SuspectRow {
    id: String,
    /// The confirmed cause, or another report of its deployment.
    confirmed: bool,
    /// A deployment (which a person may confirm as the cause).
    deployment: bool,
    what: String,
    time: String,
    /// The score in [0, 1] as the API gives it, to 3 decimals: a percentage read as a
    /// probability, and two capped at 1.0 looked equally certain.
    score: String,
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
    /// The confirmed cause when it is not among the suspects listed: its id and what it is.
    cause_apart: Option<(String, String)>,
    /// What the confirmed cause is, listed or apart: confirming another suspect replaces it,
    /// which its button says.
    replaces: Option<String>,
    /// For a deployment: the commits it brought, or why they cannot be shown.
    commits: Option<Result<CommitList, String>>,
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

/// A deployment's commits as its page lists them.
struct CommitList {
    rows: Vec<CommitRow>,
    /// Since the previous deployment (else its whole history: it has none, or its commit is
    /// no longer in the repository).
    since_previous: bool,
    /// There is a previous deployment (so a whole history means its commit was rewritten away).
    has_previous: bool,
}

fn commit_list(answer: &Value) -> CommitList {
    CommitList {
        rows: commit_rows(answer),
        since_previous: answer["wholeHistory"] == false,
        has_previous: !answer["previous"].is_null(),
    }
}

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

/// A deployment or change in a line: type · service · version · summary.
fn what_of(e: &Value) -> String {
    [
        text(e, "type"),
        text(e, "service"),
        text(e, "version"),
        text(e, "summary"),
    ]
    .into_iter()
    .filter(|p| !p.is_empty())
    .collect::<Vec<_>>()
    .join(" · ")
}

fn suspect_rows(answer: &Value) -> Vec<SuspectRow> {
    answer["suspects"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| {
                    let e = &s["event"];
                    let what = what_of(e);
                    SuspectRow {
                        id: text(e, "id"),
                        confirmed: s["confirmed"] == true,
                        deployment: text(e, "type") == "deployment",
                        what,
                        time: when_text(&text(e, "timestamp")),
                        score: s["score"].to_string(),
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

/// The event page's heading: its type, capitalised, and what names it.
fn heading_of(body: &Value) -> String {
    let kind = text(body, "type");
    let mut chars = kind.chars();
    let kind = chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect::<String>())
        .unwrap_or_else(|| "Event".into());
    // A change's summary may run to kilobytes: the heading (and the page's title) takes its
    // start.
    const LONGEST: usize = 120;
    match summary_of(body) {
        s if s.is_empty() => kind,
        s if s.chars().count() > LONGEST => {
            format!("{kind}: {}…", s.chars().take(LONGEST).collect::<String>())
        }
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
                let suspects = match state.insight.suspects(me.session.user.org_id, &e.id).await {
                    Ok(answer) => {
                        let mut rows = suspect_rows(&answer);
                        rows.sort_by_key(|r| !r.confirmed);
                        Some(rows)
                    }
                    Err(NoSuspects::NotAnAlert) => None,
                    Err(NoSuspects::Unavailable(why)) => {
                        tracing::warn!(alert = %e.id, cause = %why, "an alert's suspects could not be read");
                        return unavailable();
                    }
                };
                (suspects, cause)
            } else {
                (None, None)
            };
            // A cause confirmed through the API need not be a suspect (outside the window, or
            // behind five others): it is shown apart, so that it can be seen and withdrawn.
            let listed = (suspects.iter().flatten()).any(|s| s.confirmed);
            let cause_apart = match cause.as_deref().filter(|_| !listed) {
                Some(id) => match state.store.event(me.session.user.org_id, id).await {
                    Ok(found) => Some((
                        id.to_string(),
                        found
                            .and_then(|e| serde_json::from_str::<Value>(&e.body).ok())
                            .map_or_else(|| id.to_string(), |b| what_of(&b)),
                    )),
                    Err(_) => return unavailable(),
                },
                None => None,
            };
            let replaces = (suspects.iter().flatten())
                .find(|s| s.confirmed)
                .map(|s| s.what.clone())
                .or_else(|| cause_apart.as_ref().map(|(_, what)| what.clone()));
            let commits = if kind == "deployment" {
                let answer = state.insight.commits(me.session.user.org_id, &e.id).await;
                Some(answer.map(|a| commit_list(&a)))
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
                    cause_apart,
                    replaces,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_heading_names_the_event_and_keeps_a_long_summary_short() {
        let alert = json!({"type": "alert", "title": "Disk full", "service": "db"});
        assert_eq!(super::heading_of(&alert), "Alert: Disk full");
        assert_eq!(super::heading_of(&json!({"type": "custom"})), "Custom");
        let long = json!({"type": "change", "summary": "x".repeat(8192)});
        let heading = super::heading_of(&long);
        assert_eq!(heading.chars().count(), "Change: ".len() + 120 + 1);
        assert!(heading.ends_with('…'), "{heading}");
        let facts = super::facts_of(&alert);
        assert_eq!(facts, [("Service", "db".to_string())]);
    }
}
