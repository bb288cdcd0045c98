//! Correlation (docs/correlation.md): which deployment or change probably caused an alert
//! (`GET /v1/alerts/{id}/suspects`), the services' declared dependencies that scoring uses
//! (`PUT|GET /v1/services/{service}/dependencies`), confirmed causes
//! (`GET|POST|DELETE /v1/alerts/{id}/cause`) and the DORA figures (`GET /v1/dora`). A feature with its own
//! router and state, reading storage only; it never imports the API's handlers.

pub mod cause;
pub mod commits;
pub mod dependencies;
pub mod dora;
mod gates;
mod git_cli;
pub mod lister;
pub mod mirror;
mod request;
pub mod score;
pub mod sources;

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::auth::KeyCache;
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::storage::{Store, StoredEvent, TITLE_LOOKBACK_MICROS};
use score::{AFTER_MICROS, BEFORE_MICROS, Fields, ROLLBACK_MICROS};

/// What correlation's handlers share.
#[derive(Clone)]
pub struct CorrelationState {
    store: Store,
    keys: Arc<KeyCache>,
    mirrors: Arc<mirror::Mirrors>,
    live: Arc<dyn crate::live::LiveBridges>,
}

impl CorrelationState {
    /// Correlation over `store`, authenticating with the shared verified-key cache, reading
    /// commits with `git`, and checking new repository mappings against the live tunnels.
    pub fn new(
        store: Store,
        keys: Arc<KeyCache>,
        git: mirror::GitClient,
        live: Arc<dyn crate::live::LiveBridges>,
    ) -> Self {
        let mirrors = Arc::new(mirror::Mirrors::new(git, keys.clone()));
        CorrelationState {
            store,
            keys,
            mirrors,
            live,
        }
    }

    /// [`dora::weekly`] over this state's storage.
    pub async fn weekly_dora(
        &self,
        org_id: i64,
        service: &str,
        environment: Option<&str>,
        weeks: u32,
    ) -> Result<(Vec<Value>, Value), crate::storage::StorageError> {
        dora::weekly(&self.store, org_id, service, environment, weeks).await
    }
}

/// Correlation's routes (the same on both listeners).
pub fn router(state: CorrelationState) -> Router {
    Router::new()
        .route("/v1/alerts/{id}/suspects", get(suspects))
        .route(
            "/v1/alerts/{id}/cause",
            get(cause::read_cause)
                .post(cause::confirm_cause)
                .delete(cause::withdraw_cause),
        )
        .route(
            "/v1/services/{service}/dependencies",
            get(dependencies::dependencies).put(dependencies::set_dependencies),
        )
        .route("/v1/dora", get(dora::figures))
        .route(
            "/v1/repository-sources",
            get(sources::list_sources)
                .put(sources::set_source)
                .delete(sources::remove_source),
        )
        .route(
            "/v1/deployments/{id}/commits",
            get(commits::deployment_commits),
        )
        .with_state(state)
}

fn parse(e: &StoredEvent) -> Result<(Value, Fields), Problem> {
    let body = e.to_json().map_err(|cause| {
        tracing::error!(event = %e.id, cause = %cause, "a stored event's body does not parse");
        Problem::internal(format!(
            "event {:?} is stored but cannot be read ({cause}); the server's log has the details",
            e.id
        ))
    })?;
    let fields = Fields::of(&body, e.occurred_at);
    Ok((body, fields))
}

/// The org's alert `id`, or 404 (also for an event that is not an alert).
async fn alert(
    state: &CorrelationState,
    org_id: i64,
    id: &str,
) -> Result<(Value, Fields), Problem> {
    let stored = state
        .store
        .event(org_id, id)
        .await
        .map_err(|e| storage_unavailable(&e))?
        .ok_or_else(|| Problem::not_found(format!("no event {id:?} in this org")))?;
    let (body, fields) = parse(&stored)?;
    if fields.kind != "alert" {
        return Err(Problem::not_found(format!(
            "event {id:?} is {}, not an alert: suspects and causes belong to alerts",
            article(&fields.kind)
        )));
    }
    Ok((body, fields))
}

/// When an earlier alert like this one (same dedupKey, or else same service, title and
/// environment: a staging firing says nothing of production) first fired within
/// [`TITLE_LOOKBACK_MICROS`] before it.
async fn first_fired(
    state: &CorrelationState,
    org_id: i64,
    alert: &Fields,
) -> Result<Option<i64>, Problem> {
    let failed = |e: crate::storage::StorageError| storage_unavailable(&e);
    if let Some(key) = &alert.dedup_key {
        return state
            .store
            .first_alert_by_key(org_id, key, alert.at - TITLE_LOOKBACK_MICROS, alert.at)
            .await
            .map_err(failed);
    }
    let (Some(service), Some(title)) = (&alert.service, &alert.title) else {
        return Ok(None);
    };
    // A page at a time, so that a noisy alert of the service (thousands a week) neither hides
    // an earlier firing of this one behind a cap nor holds all their bodies at once.
    const PAGE: i64 = 1_000;
    let environment = alert.environment.as_deref();
    let mut after = (alert.at - TITLE_LOOKBACK_MICROS, String::new());
    loop {
        let page = state
            .store
            .alerts_of_service(org_id, service, (after.0, &after.1), alert.at, PAGE)
            .await
            .map_err(failed)?;
        let found = page.iter().find_map(|e| {
            let body: Value = serde_json::from_str(&e.body).ok()?;
            let same = body.get("title").and_then(Value::as_str) == Some(title)
                && body.get("environment").and_then(Value::as_str) == environment;
            same.then_some(e.occurred_at)
        });
        match page.last() {
            _ if found.is_some() => return Ok(found),
            Some(last) if page.len() as i64 == PAGE => after = (last.occurred_at, last.id.clone()),
            _ => return Ok(None),
        }
    }
}

/// The suspects of one alert, as the API answers them.
pub async fn suspects_of(
    state: &CorrelationState,
    org_id: i64,
    id: &str,
) -> Result<Value, Problem> {
    let (alert_body, mut alert) = alert(state, org_id, id).await?;
    // A resolve is when the incident ended: it is ranked from the firing it resolves (the
    // first of its dedupKey since the key's previous resolve, in the week before), if stored.
    if alert.status.as_deref() == Some("resolved")
        && let Some(key) = &alert.dedup_key
    {
        let from = alert.at - TITLE_LOOKBACK_MICROS;
        let started = (state
            .store
            .incident_start(org_id, key, from, alert.at)
            .await)
            .map_err(|e| storage_unavailable(&e))?;
        if let Some(started) = started {
            alert.at = started;
        }
    }
    let stored = state
        .store
        .changes_between(
            org_id,
            alert.environment.as_deref(),
            alert.at - BEFORE_MICROS,
            alert.at + AFTER_MICROS,
        )
        .await
        .map_err(|e| storage_unavailable(&e))?;
    // A candidate that cannot be read (storage damage) is listed apart, not ranked: the
    // others still are.
    let mut readable = Vec::with_capacity(stored.len());
    let mut bodies = Vec::with_capacity(stored.len());
    let mut candidates = Vec::with_capacity(stored.len());
    let mut unreadable = Vec::new();
    for e in &stored {
        match parse(e) {
            Ok((body, fields)) => {
                readable.push(e);
                bodies.push(body);
                candidates.push(fields);
            }
            Err(problem) => unreadable.push(json!({"id": e.id, "detail": problem.detail})),
        }
    }
    // Deployments after the window: no suspects, but one may roll a suspect back.
    let later: Vec<Fields> = state
        .store
        .changes_between(
            org_id,
            alert.environment.as_deref(),
            alert.at + AFTER_MICROS + 1,
            alert.at + ROLLBACK_MICROS,
        )
        .await
        .map_err(|e| storage_unavailable(&e))?
        .iter()
        .filter_map(|e| parse(e).ok().map(|(_, fields)| fields))
        .filter(|f| f.kind == "deployment")
        .collect();
    let first = first_fired(state, org_id, &alert).await?;
    let dependencies = match &alert.service {
        Some(s) => state
            .store
            .dependencies(org_id, s)
            .await
            .map_err(|e| storage_unavailable(&e))?,
        None => Vec::new(),
    };
    let earlier = earlier_deployments(state, org_id, &alert, &candidates, &later).await?;
    let around = score::Around {
        later: &later,
        earlier: &earlier,
    };
    let ranked = score::rank(&alert, &candidates, around, first, &dependencies);
    // The suspect marked as the confirmed cause: the confirmed report itself, else the first
    // ranked later report of its deployment (at most one).
    let cause = confirmed_cause(state, org_id, id).await?;
    let marked = cause.as_ref().and_then(|(cause_id, cause)| {
        (ranked.iter().find(|s| readable[s.index].id == *cause_id))
            .or_else(|| {
                (ranked.iter())
                    .find(|s| score::carries_confirmation(cause, &candidates[s.index], &candidates))
            })
            .map(|s| s.index)
    });
    let mut suspects: Vec<Value> = Vec::with_capacity(ranked.len());
    for mut s in ranked {
        let e = readable[s.index];
        if candidates[s.index].kind == "deployment" {
            let listed = state
                .store
                .listed_commits(org_id, &e.id)
                .await
                .map_err(|e| storage_unavailable(&e))?;
            if let Some(reason) = listed.and_then(|l| commits::summary(&l)) {
                s.reasons.push(reason);
            }
        }
        suspects.push(
            json!({"event": bodies[s.index], "score": s.score, "reasons": s.reasons,
            "confirmed": marked == Some(s.index)}),
        );
    }
    let mut answer = json!({"alert": alert_body, "suspects": suspects});
    if stored.is_empty() {
        let (in_env, exactly) = match alert.environment.as_deref() {
            Some(e) => (
                format!(" in environment {e:?}"),
                "; environments match exactly as the events name them",
            ),
            None => (" in any environment".to_string(), ""),
        };
        answer["note"] = json!(format!(
            "no deployment or change{in_env} from 24 h before the alert to 2 min after it{exactly}"
        ));
    }
    if !unreadable.is_empty() {
        answer["unreadable"] = Value::Array(unreadable);
    }
    Ok(answer)
}

/// The deployments and changes most likely to have caused an alert: top 5, each with a score
/// in [0, 1] and reasons (docs/correlation.md).
#[utoipa::path(get, path = "/v1/alerts/{id}/suspects", tag = "correlation",
    params(("id" = String, Path, description = "An alert's event id")),
    responses((status = 200, body = crate::openapi::Suspects),
        crate::openapi::ReadProblems,
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub async fn suspects(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    Ok(Json(suspects_of(&state, principal.org_id, &id).await?))
}

/// The deployment confirmed as the alert's cause, if any: its id and fields (one whose body
/// cannot be read is matched by id alone).
async fn confirmed_cause(
    state: &CorrelationState,
    org_id: i64,
    alert_id: &str,
) -> Result<Option<(String, Fields)>, Problem> {
    let unavailable = |e: crate::storage::StorageError| storage_unavailable(&e);
    let Some(cause_id) = state
        .store
        .cause_of(org_id, alert_id)
        .await
        .map_err(unavailable)?
    else {
        return Ok(None);
    };
    let stored = state
        .store
        .event(org_id, &cause_id)
        .await
        .map_err(unavailable)?;
    let fields = stored
        .and_then(|e| parse(&e).ok())
        .map(|(_, fields)| fields)
        .unwrap_or_default();
    Ok(Some((cause_id, fields)))
}

/// How far before the candidates' window a version brought back after an alert is looked for
/// (as far as the DORA figures look for one).
const EARLIER_MICROS: i64 = 30 * 86_400_000_000;

/// The deployments before the candidates' window (up to [`EARLIER_MICROS`] before it, the
/// newest [`crate::storage::MAX_CANDIDATES`] of each environment) of the services deployed
/// after the alert: a rollback often brings back a version deployed days before. Read only
/// for an environment where a deployment came after the alert and one came before it (what
/// a rollback needs), from the same record by hour as the candidates.
async fn earlier_deployments(
    state: &CorrelationState,
    org_id: i64,
    alert: &Fields,
    candidates: &[Fields],
    later: &[Fields],
) -> Result<Vec<Fields>, Problem> {
    let deployed = |d: &&Fields| d.kind == "deployment" && d.service.is_some();
    let before: Vec<&Fields> = candidates
        .iter()
        .filter(deployed)
        .filter(|d| d.at <= alert.at)
        .collect();
    let mut environments: Vec<&str> = Vec::new();
    for d in candidates.iter().chain(later).filter(deployed) {
        if let Some(env) = d.environment.as_deref()
            && d.at > alert.at
            && !environments.contains(&env)
            && before
                .iter()
                .any(|b| b.environment.as_deref() == Some(env) && b.service == d.service)
        {
            environments.push(env);
        }
    }
    let window_starts = alert.at - BEFORE_MICROS;
    let mut earlier = Vec::new();
    for env in environments {
        let stored = state
            .store
            .changes_between(
                org_id,
                Some(env),
                window_starts - EARLIER_MICROS,
                window_starts - 1,
            )
            .await
            .map_err(|e| storage_unavailable(&e))?;
        earlier.extend(
            stored
                .iter()
                .filter_map(|e| parse(e).ok().map(|(_, f)| f))
                .filter(|f| f.kind == "deployment"),
        );
    }
    Ok(earlier)
}

/// An event kind with its article, for messages: "an alert", "a deployment".
pub(super) fn article(kind: &str) -> String {
    let an = kind.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {kind}", if an { "an" } else { "a" })
}
