//! `GET /v1/dora`: the four DORA figures of the org's deployments, for one service and
//! environment or all, over a window (docs/correlation.md, "DORA figures").
//!
//! - Deployment frequency: successful deployments in the window, and per day.
//! - Change lead time: from the oldest commit the deployment brought (as listed through its
//!   repository's Git source), else `metadata.commitTimestamp`, to the successful deployment.
//! - Change fail rate: failed deployments over finished ones; failed means status `failure`,
//!   `error` or `rolled_back`, followed by a deployment that went out and brought back a
//!   version that ran before (a rollback), or confirmed as an alert's cause.
//! - Failed deployment recovery time: from a failed deployment to the next successful one of
//!   the same service and environment.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use chrono::DateTime;
use serde::Deserialize;
use serde_json::{Value, json};

use super::CorrelationState;
use super::score::Fields;
use crate::problem::{Problem, storage_unavailable};
use crate::storage::{EventQuery, StorageError, Store};

/// 0000-01-01T00:00:00Z in µs since the Unix epoch.
const YEAR_ZERO_MICROS: i64 = -62_167_219_200_000_000;

/// The window when `since` is not given: 30 days before `until`.
const DEFAULT_DAYS: i64 = 30;

/// How far before and after a window deployments are read: rollbacks to versions deployed
/// before it, and the rollbacks and recoveries that follow its last deployments.
const HORIZON: i64 = DEFAULT_DAYS * 86_400_000_000;

/// Most deployments read for one answer.
const MAX_DEPLOYMENTS: i64 = 100_000;
/// Deployments read per query.
const PAGE: i64 = 500;

/// Query string of `GET /v1/dora`: the same names as `GET /v1/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    service: Option<String>,
    environment: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

/// `x` to three decimals, or to three significant digits below 1: six deployments over
/// decades read 0.000274 a day, never 0 beside a count of 6.
fn rounded(x: f64) -> f64 {
    if x == 0.0 || x.abs() >= 1.0 || !x.is_finite() {
        return (x * 1000.0).round() / 1000.0;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// The p-th percentile (nearest rank) of sorted seconds.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn spread(mut seconds: Vec<f64>) -> Value {
    seconds.sort_by(f64::total_cmp);
    json!({"p50": percentile(&seconds, 0.5), "p90": percentile(&seconds, 0.9), "count": seconds.len()})
}

/// A deployment as the figures need it.
struct Deployment {
    id: String,
    fields: Fields,
    commit_at: Option<i64>,
}

/// The figures over `deployments` (oldest first, with history before `since`), counting those
/// in `[since, until)`.
fn figures_of(
    deployments: &[Deployment],
    confirmed: &HashSet<String>,
    since: i64,
    until: i64,
) -> Value {
    let n = deployments.len();
    let status = |i: usize| deployments[i].fields.status.as_deref().unwrap_or("");
    let pair = |i: usize| {
        let f = &deployments[i].fields;
        (f.service.as_deref(), f.environment.as_deref())
    };
    let in_window =
        |i: usize| deployments[i].fields.at >= since && deployments[i].fields.at < until;
    // The next deployment of the same service and environment (walking backwards once).
    let mut next_same = vec![None; n];
    let mut last: HashMap<(Option<&str>, Option<&str>), usize> = HashMap::new();
    for i in (0..n).rev() {
        next_same[i] = last.insert(pair(i), i);
    }
    // A confirmation of an unfinished report passes to the next report of the same deployment
    // (its service and environment's next, of the same version): one deployment, confirmed
    // once, counted by its latest report.
    let unfinished = |i: usize| matches!(status(i), "queued" | "pending" | "in_progress");
    let mut cause = vec![false; n];
    let mut passed_on = vec![false; n];
    for i in 0..n {
        cause[i] |= confirmed.contains(&deployments[i].id);
        let version = deployments[i].fields.version.as_deref();
        if let Some(j) = next_same[i]
            && cause[i]
            && unfinished(i)
            && version.is_some()
            && deployments[j].fields.version.as_deref() == version
        {
            cause[j] = true;
            passed_on[i] = true;
        }
    }
    // A deployment that failed or was cancelled did not go out: it brings nothing back, and
    // its version did not run. An unfinished report went out as its deployment's next report
    // says (`pending`, then `cancelled`: it did not); walking backwards once.
    let same_version = |i: usize, j: usize| {
        let v = deployments[i].fields.version.as_deref();
        v.is_some() && v == deployments[j].fields.version.as_deref()
    };
    let mut went_out = vec![false; n];
    for i in (0..n).rev() {
        went_out[i] = match next_same[i] {
            Some(j) if unfinished(i) && same_version(i, j) => went_out[j],
            _ => !matches!(status(i), "failure" | "error" | "cancelled"),
        };
    }
    // The next deployment of the same pair that went out (walking backwards once).
    let mut next_out = vec![None; n];
    for i in (0..n).rev() {
        next_out[i] = next_same[i].and_then(|j| if went_out[j] { Some(j) } else { next_out[j] });
    }
    // Failed: its status, a confirmed cause, or rolled back (the next deployment of its service
    // and environment that went out brings back a version that ran before it); walking
    // forwards once with the versions each pair has run.
    let mut failed = vec![false; n];
    let mut ran: HashMap<(Option<&str>, Option<&str>), HashSet<&str>> = HashMap::new();
    for i in 0..n {
        let d = &deployments[i];
        let versions = ran.entry(pair(i)).or_default();
        let rolled_back = next_out[i].is_some_and(|j| {
            let next = deployments[j].fields.version.as_deref();
            next.is_some_and(|v| Some(v) != d.fields.version.as_deref() && versions.contains(v))
        });
        failed[i] =
            ["failure", "error", "rolled_back"].contains(&status(i)) || cause[i] || rolled_back;
        if let Some(v) = d.fields.version.as_deref()
            && went_out[i]
            && !unfinished(i)
        {
            versions.insert(v);
        }
    }
    // The next successful, not failed, deployment of the same pair (walking backwards once).
    let mut next_good = vec![None; n];
    for i in (0..n).rev() {
        next_good[i] = next_same[i].and_then(|j| {
            if status(j) == "success" && !failed[j] {
                Some(j)
            } else {
                next_good[j]
            }
        });
    }
    let success: Vec<usize> = (0..n)
        .filter(|&i| in_window(i) && status(i) == "success")
        .collect();
    // A deployment confirmed as an alert's cause went out: a person said so, whatever status
    // was last reported for it (one confirmed while `in_progress` is counted, not lost).
    let finished: Vec<usize> = (0..n)
        .filter(|&i| {
            in_window(i)
                && (["success", "failure", "error", "rolled_back"].contains(&status(i))
                    || (cause[i] && !passed_on[i]))
        })
        .collect();
    let failures: Vec<usize> = finished.iter().copied().filter(|&i| failed[i]).collect();
    let days = ((until - since) as f64 / 86_400_000_000.0).max(1.0 / 24.0);
    let lead: Vec<f64> = success
        .iter()
        .filter_map(|&i| {
            let d = &deployments[i];
            d.commit_at.map(|c| (d.fields.at - c) as f64 / 1_000_000.0)
        })
        .filter(|s| *s >= 0.0)
        .collect();
    let recovery: Vec<f64> = failures
        .iter()
        .filter_map(|&i| {
            next_good[i]
                .map(|j| (deployments[j].fields.at - deployments[i].fields.at) as f64 / 1_000_000.0)
        })
        .collect();
    json!({
        "deploymentFrequency": {"count": success.len(), "perDay": rounded(success.len() as f64 / days)},
        "changeLeadTimeSeconds": spread(lead),
        "changeFailRate": if finished.is_empty() { Value::Null } else {
            json!(rounded(failures.len() as f64 / finished.len() as f64))
        },
        "recoveryTimeSeconds": spread(recovery),
    })
}

/// The DORA figures of the org's deployments over a window (default: the 30 days to now).
#[utoipa::path(get, path = "/v1/dora", tag = "correlation",
    params(("service" = Option<String>, Query), ("environment" = Option<String>, Query),
        ("since" = Option<String>, Query, description = "RFC 3339, inclusive"),
        ("until" = Option<String>, Query, description = "RFC 3339, exclusive")),
    responses((status = 200, body = crate::openapi::Dora),
        crate::openapi::ReadProblems))]
pub async fn figures(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    let Query(mut p) = params.map_err(|e| {
        crate::query::query_problem(&e, &["service", "environment", "since", "until"])
    })?;
    crate::query::trim_names(&mut p.service, &mut p.environment);
    crate::query::filter_params(p.service.as_deref(), p.environment.as_deref())?;
    // By default the window ends at the next whole millisecond: it holds every event received
    // so far and is echoed with three digits, as the server's own times.
    let until = crate::query::time_param("until", p.until.as_deref())?
        .unwrap_or_else(|| (crate::storage::now_micros() / 1000 + 1) * 1000);
    // The default window starts no earlier than year 0, the first an RFC 3339 time can say.
    let since = crate::query::time_param("since", p.since.as_deref())?
        .unwrap_or((until - DEFAULT_DAYS * 86_400_000_000).max(YEAR_ZERO_MICROS));
    if p.until.is_none() && since >= until {
        return Err(Problem::bad_request(
            "query parameter since must be before until, which defaults to now: pass an until after since",
        ));
    }
    if p.since.is_none() && since >= until {
        return Err(Problem::bad_request(
            "query parameter until is at or before the start of year 0, the earliest time there is: pass a later until",
        ));
    }
    crate::query::window(Some(since), Some(until))?;
    let (deployments, confirmed, complete_from) = load(
        &state.store,
        principal.org_id,
        p.service.as_deref(),
        p.environment.as_deref(),
        (since, until),
    )
    .await
    .map_err(|e| storage_unavailable(&e))?;
    Ok(Json(answer(
        &deployments,
        &confirmed,
        (p.service.as_deref(), p.environment.as_deref()),
        (since, until),
        complete_from,
    )))
}

/// The figures of `[since, until)` with what they are about, as the API answers them;
/// `truncated` when deployments of the window were left unread ([`MAX_DEPLOYMENTS`]), all of
/// them older than `complete_from`.
fn answer(
    deployments: &[Deployment],
    confirmed: &HashSet<String>,
    (service, environment): (Option<&str>, Option<&str>),
    (since, until): (i64, i64),
    complete_from: i64,
) -> Value {
    let mut answer = figures_of(deployments, confirmed, since, until);
    answer["service"] = json!(service);
    answer["environment"] = json!(environment);
    answer["since"] = json!(crate::time::format_bound(since));
    answer["until"] = json!(crate::time::format_bound(until));
    answer["truncated"] = json!(complete_from >= since);
    // Not said when deployments of the window were left unread (`truncated`).
    let none = !deployments
        .iter()
        .any(|d| d.fields.at >= since && d.fields.at < until);
    if none && complete_from < since {
        answer["note"] = json!(no_deployment_note(service, environment));
    }
    answer
}

/// Why every figure is empty, when no deployment falls in the window: most often a service or
/// environment spelt otherwise than the events spell it.
fn no_deployment_note(service: Option<&str>, environment: Option<&str>) -> String {
    let of = service.map_or(String::new(), |s| format!(" of service {s:?}"));
    let in_env = environment.map_or(String::new(), |e| format!(" in environment {e:?}"));
    let names = match (service, environment) {
        (None, None) => "",
        (Some(_), None) => "; services match",
        (None, Some(_)) => "; environments match",
        (Some(_), Some(_)) => "; services and environments match",
    };
    let exactly = if names.is_empty() {
        String::new()
    } else {
        format!(
            "{names} exactly as the events name them (GET /v1/events?type=deployment lists them)"
        )
    };
    format!("no deployment{of}{in_env} in this window{exactly}")
}

/// The org's deployments from 30 days before `since` to 30 days after `until`, oldest first
/// (at most [`MAX_DEPLOYMENTS`], the newest), the deployments confirmed as causes, and the
/// time from which every deployment was read (`i64::MIN` when none was left unread).
async fn load(
    store: &Store,
    org_id: i64,
    service: Option<&str>,
    environment: Option<&str>,
    window: (i64, i64),
) -> Result<(Vec<Deployment>, HashSet<String>, i64), StorageError> {
    load_at_most(
        store,
        org_id,
        (service, environment),
        window,
        MAX_DEPLOYMENTS,
    )
    .await
}

/// [`load`], reading at most `max` deployments (a multiple of [`PAGE`]).
async fn load_at_most(
    store: &Store,
    org_id: i64,
    (service, environment): (Option<&str>, Option<&str>),
    (since, until): (i64, i64),
    max: i64,
) -> Result<(Vec<Deployment>, HashSet<String>, i64), StorageError> {
    let mut query = EventQuery {
        kind: Some("deployment".into()),
        service: service.map(str::to_string),
        environment: environment.map(str::to_string),
        since: Some(since - HORIZON),
        until: Some(until.saturating_add(HORIZON)),
        after: None,
        limit: PAGE,
    };
    let confirmed: HashSet<String> = store.confirmed_causes(org_id).await?.into_iter().collect();
    let listed: HashMap<String, i64> = store
        .first_commit_times(org_id)
        .await?
        .into_iter()
        .collect();
    // A page of bodies at a time, each read into the few fields DORA needs before the next:
    // an org's events may be up to 64 KiB each, and are never all held at once.
    let mut deployments: Vec<Deployment> = Vec::new();
    let mut complete_from = i64::MIN;
    loop {
        let page = store.list_events(org_id, &query).await?;
        let full = page.len() as i64 == PAGE;
        query.after = page.last().map(|e| (e.occurred_at, e.id.clone()));
        deployments.extend(page.into_iter().filter_map(|e| {
            // A damaged row must not take the org's figures down; the operator hears of it.
            let body: Value = match serde_json::from_str(&e.body) {
                Ok(body) => body,
                Err(cause) => {
                    tracing::error!(event = %e.id, cause = %cause, "a stored deployment's body does not parse; DORA figures leave it out");
                    return None;
                }
            };
            let commit_at = listed.get(&e.id).copied().or_else(|| {
                body.pointer("/metadata/commitTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.timestamp_micros())
            });
            Some(Deployment {
                fields: Fields::of(&body, e.occurred_at),
                id: e.id,
                commit_at,
            })
        }));
        if !full {
            break;
        }
        if deployments.len() as i64 >= max {
            // Older ones are left unread, if there are any: the newest of them says from
            // when on every deployment was read.
            let rest = EventQuery {
                limit: 1,
                ..query.clone()
            };
            if let Some(unread) = store.list_events(org_id, &rest).await?.first() {
                complete_from = unread.occurred_at;
            }
            break;
        }
    }
    // Oldest first, and in the order received where two share a time (the list comes newest
    // first): a rollback then follows the deployment it undoes.
    // An unfinished report before a finished one at the same time (one deployment's
    // `in_progress` and `success`), as the suspects read them.
    let finished = |d: &Deployment| {
        !matches!(
            d.fields.status.as_deref(),
            Some("queued" | "pending" | "in_progress")
        )
    };
    deployments
        .sort_by(|a, b| (a.fields.at, finished(a), &a.id).cmp(&(b.fields.at, finished(b), &b.id)));
    Ok((deployments, confirmed, complete_from))
}

/// The figures of each of `weeks` calendar weeks (Monday 00:00 UTC to the next; the last one
/// this week so far), oldest first, and of the whole span: a bar labelled with a Monday holds
/// that week's deployments.
pub async fn weekly(
    store: &Store,
    org_id: i64,
    service: &str,
    environment: Option<&str>,
    weeks: u32,
) -> Result<(Vec<Value>, Value), StorageError> {
    const DAY: i64 = 86_400_000_000;
    const WEEK: i64 = 7 * DAY;
    // The next whole millisecond, as the API's default `until`: the page's link to
    // `GET /v1/dora` then quotes the window in the API's own precision.
    let until = (crate::storage::now_micros() / 1000 + 1) * 1000;
    let today = until.div_euclid(DAY);
    // 1970-01-01 was a Thursday, three days after a Monday.
    let this_monday = (today - (today + 3).rem_euclid(7)) * DAY;
    let since = this_monday - (i64::from(weeks) - 1) * WEEK;
    let (deployments, confirmed, complete_from) =
        load(store, org_id, Some(service), environment, (since, until)).await?;
    // Each week reads what `GET /v1/dora` would for that week alone (30 days on each side),
    // not the whole span's history: a bar and the API's answer for its week agree.
    let read_for = |from: i64, to: i64| {
        let first = deployments.partition_point(|d| d.fields.at < from - HORIZON);
        let end = deployments.partition_point(|d| d.fields.at < to.saturating_add(HORIZON));
        &deployments[first..end.max(first)]
    };
    let each = (0..i64::from(weeks))
        .map(|w| {
            let from = since + w * WEEK;
            let to = (from + WEEK).min(until);
            answer(
                read_for(from, to),
                &confirmed,
                (Some(service), environment),
                (from, to),
                complete_from,
            )
        })
        .collect();
    let whole = answer(
        &deployments,
        &confirmed,
        (Some(service), environment),
        (since, until),
        complete_from,
    );
    Ok((each, whole))
}

#[cfg(test)]
mod tests;
