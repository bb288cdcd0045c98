//! Confirmed causes: `POST /v1/alerts/{id}/cause` records the deployment a person confirmed
//! as an alert's cause (counted as failed in the change fail rate), `GET` reads it back,
//! `DELETE` withdraws it.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::request::{self, actor, json_body, shown};
use super::{CorrelationState, alert, parse};
use crate::auth::PeerAddr;
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::signals::event::FieldError;

/// The shape of the body of `POST /v1/alerts/{id}/cause`.
const CAUSE_SHAPE: &str = r#"{"deploymentId": "<the id of a deployment event>"}"#;

/// The deployment id a cause body names, or what is wrong with it, field by field.
fn deployment_id_of(body: &Value) -> Result<String, Vec<FieldError>> {
    if let Some(problem) = request::not_an_object(body, CAUSE_SHAPE) {
        return Err(vec![problem]);
    }
    let mut errors = request::unknown_fields(body, &["deploymentId"], CAUSE_SHAPE);
    let id = match body.get("deploymentId") {
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        found => {
            let what = if found.is_some() {
                "must be"
            } else {
                "is required:"
            };
            errors.insert(
                0,
                FieldError {
                    pointer: "/deploymentId".into(),
                    detail: format!(
                        "deploymentId {what} the id of a deployment event (a non-empty string)"
                    ),
                },
            );
            None
        }
    };
    match id {
        Some(id) if errors.is_empty() => Ok(id),
        _ => Err(errors),
    }
}

/// `POST /v1/alerts/{id}/cause` with `{"deploymentId": …}`: a person confirms the cause; it
/// counts the deployment as failed in the change fail rate.
#[utoipa::path(post, path = "/v1/alerts/{id}/cause", tag = "correlation",
    params(("id" = String, Path, description = "An alert's event id")),
    request_body(content = crate::openapi::CauseBody, content_type = "application/json"),
    responses((status = 200, body = crate::openapi::CauseConfirmed),
        crate::openapi::BodyProblems,
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub async fn confirm_cause(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    uri: axum::http::Uri,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    // The alert first, as the other routes of an alert: no one fixes a body for an alert that
    // is not there.
    alert(&state, principal.org_id, &id).await?;
    let deployment_id =
        deployment_id_of(&json_body(body, CAUSE_SHAPE)?).map_err(Problem::invalid)?;
    let deployment = state
        .store
        .event(principal.org_id, &deployment_id)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let kind = match &deployment {
        Some(e) => Some(parse(e)?.1.kind),
        None => None,
    };
    if kind.as_deref() != Some("deployment") {
        let detail = match kind {
            Some(kind) => format!(
                "{} is {}, not a deployment: only a deployment is confirmed as a cause; give \
                 the id of a deployment, such as one of the alert's suspects",
                shown(&deployment_id),
                super::article(&kind)
            ),
            None => format!(
                "{} is not the id of a deployment event of this org",
                shown(&deployment_id)
            ),
        };
        return Err(Problem::invalid(vec![FieldError {
            pointer: "/deploymentId".into(),
            detail,
        }]));
    }
    state
        .store
        .confirm_cause(
            principal.org_id,
            &id,
            &deployment_id,
            &actor(&principal, peer),
        )
        .await
        .map_err(|e| storage_unavailable(&e))?;
    Ok(Json(json!({"alertId": id, "deploymentId": deployment_id})))
}

/// `GET /v1/alerts/{id}/cause`: the deployment confirmed as the alert's cause, read back as
/// `POST` answered it. 404 when the alert has none.
#[utoipa::path(get, path = "/v1/alerts/{id}/cause", tag = "correlation",
    params(("id" = String, Path, description = "An alert's event id")),
    responses((status = 200, body = crate::openapi::CauseConfirmed),
        crate::openapi::ReadProblems,
        (status = 404, description = "No such alert, or no confirmed cause", body = Problem, content_type = "application/problem+json")))]
pub async fn read_cause(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    uri: axum::http::Uri,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    alert(&state, principal.org_id, &id).await?;
    let cause = state
        .store
        .cause_of(principal.org_id, &id)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    match cause {
        Some(deployment_id) => Ok(Json(json!({"alertId": id, "deploymentId": deployment_id}))),
        None => Err(Problem::not_found(format!(
            "alert {} has no confirmed cause",
            shown(&id)
        ))),
    }
}

/// `DELETE /v1/alerts/{id}/cause`: withdraws a confirmation made by mistake; the deployment is
/// no longer counted as failed for it. 404 when the alert has no confirmed cause.
#[utoipa::path(delete, path = "/v1/alerts/{id}/cause", tag = "correlation",
    params(("id" = String, Path, description = "An alert's event id")),
    responses((status = 204, description = "Withdrawn"),
        crate::openapi::ReadProblems,
        (status = 404, description = "No such alert, or no confirmed cause", body = Problem, content_type = "application/problem+json")))]
pub async fn withdraw_cause(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    uri: axum::http::Uri,
) -> Result<StatusCode, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    alert(&state, principal.org_id, &id).await?;
    let withdrawn = state
        .store
        .withdraw_cause(principal.org_id, &id, &actor(&principal, peer))
        .await
        .map_err(|e| storage_unavailable(&e))?;
    match withdrawn {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(Problem::not_found(format!(
            "alert {} has no confirmed cause to withdraw",
            shown(&id)
        ))),
    }
}
