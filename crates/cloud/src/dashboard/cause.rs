//! Confirming an alert's cause from its page: an admin picks the deployment that caused it,
//! which the change fail rate then counts, and may withdraw a confirmation made by mistake.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use crate::storage::StoredEvent;

use super::DashboardState;
use super::done::Done;
use super::events::text;
use super::extract::Path;
use super::me::Me;
use super::render::{message, unavailable};

/// The confirm-cause form's fields.
#[derive(Deserialize)]
pub struct CauseForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    deployment: String,
}

/// `POST /events/{id}/cause`: an admin confirms which deployment caused the alert (counted in
/// the change fail rate).
pub async fn confirm_cause(
    State(state): State<DashboardState>,
    me: Me,
    Path(id): Path<String>,
    super::form::Form(form): super::form::Form<CauseForm>,
) -> Response {
    if let Some(answer) = super::me::refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    if form.deployment.trim().is_empty() {
        return message(
            StatusCode::UNPROCESSABLE_ENTITY,
            "No deployment chosen",
            "The form named no deployment: choose one of the suspects on the alert's page and confirm it there.",
            &format!("/events/{id}"),
            "Back to the event",
        );
    }
    let org_id = me.session.user.org_id;
    let kind_of = |e: &Option<StoredEvent>| {
        e.as_ref()
            .and_then(|e| serde_json::from_str::<Value>(&e.body).ok())
            .map(|b| text(&b, "type"))
    };
    let (Ok(alert), Ok(deployment)) = (
        state.store.event(org_id, &id).await,
        state.store.event(org_id, &form.deployment).await,
    ) else {
        return unavailable();
    };
    let (alert_kind, deployment_kind) = (kind_of(&alert), kind_of(&deployment));
    if alert_kind.as_deref() != Some("alert") || deployment_kind.as_deref() != Some("deployment") {
        // Which of the two is wrong, and what it is instead.
        let what = |kind: &Option<String>| match kind.as_deref() {
            Some("alert") => "an alert",
            Some("deployment") => "a deployment",
            Some("change") => "a change",
            _ => "a custom event",
        };
        let why = match (&alert_kind, &deployment_kind) {
            (None, _) => "Your org has no event with this page's id.".to_string(),
            (Some(kind), _) if kind != "alert" => {
                format!("This page's event is {}, not an alert.", what(&alert_kind))
            }
            (_, None) => "Your org has no event with the id chosen as the cause.".to_string(),
            _ => format!(
                "The event chosen as the cause is {}, not a deployment.",
                what(&deployment_kind)
            ),
        };
        return message(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Not a cause this alert can have",
            &format!(
                "{why} A cause is a deployment of your org, confirmed for an alert of your org."
            ),
            &format!("/events/{id}"),
            "Back to the event",
        );
    }
    let confirmed = (state.store)
        .confirm_cause(org_id, &id, &form.deployment, &me.actor())
        .await;
    if confirmed.is_err() {
        return unavailable();
    }
    said_on_event(&id, Done::CauseConfirmed, &me)
}

/// The withdraw form's fields.
#[derive(Deserialize)]
pub struct WithdrawForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /events/{id}/cause/withdraw`: an admin withdraws the alert's confirmed cause (a
/// confirmation made by mistake); the deployment is no longer counted as failed for it.
pub async fn withdraw_cause(
    State(state): State<DashboardState>,
    me: Me,
    Path(id): Path<String>,
    super::form::Form(form): super::form::Form<WithdrawForm>,
) -> Response {
    if let Some(answer) = super::me::refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    // Withdrawn already (the form sent twice): the page shows that there is none.
    let withdrawn = (state.store)
        .withdraw_cause(me.session.user.org_id, &id, &me.actor())
        .await;
    match withdrawn {
        Ok(Some(_)) => said_on_event(&id, Done::CauseWithdrawn, &me),
        Ok(None) => match state.store.event(me.session.user.org_id, &id).await {
            Ok(Some(_)) => said_on_event(&id, Done::NothingToWithdraw, &me),
            // No event of this org: a 404 page, not a redirect to the event's own 404.
            Ok(None) => message(
                StatusCode::NOT_FOUND,
                "No such alert",
                "Your org has no alert with this id, so it has no cause to withdraw.",
                "/events",
                "Back to events",
            ),
            Err(_) => unavailable(),
        },
        Err(_) => unavailable(),
    }
}

/// The event's page, its id percent-encoded as the path takes it.
fn event_page(id: &str) -> String {
    let id: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
    format!("/events/{id}")
}

/// To the event's page; also the answer to a GET of a cause form's address.
pub fn back_to_event(id: &str) -> Response {
    axum::response::Redirect::to(&event_page(id)).into_response()
}

/// To the event's page, which says what was `done` (a notice, announced to screen readers).
fn said_on_event(id: &str, done: Done, me: &Me) -> Response {
    axum::response::Redirect::to(&done.after(&event_page(id), "", &me.csrf)).into_response()
}
