//! Notifications: each user's choice of an in-dashboard notice when a connected bridge runs a
//! release older than the one this cloud ships, and the org's webhook (admins set or remove
//! it; its signing secret is shown once) with its recent deliveries. The notifier delivers.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::DashboardState;
use super::confirm::Confirm;
use super::done::Done;
use super::form::Form;
use super::me::{Me, refuse_admin_form};
use super::render::{csrf_refused, message, page, unavailable, when_micros};

struct DeliveryRow {
    time: String,
    kind: String,
    subject: String,
    attempts: i64,
    state: String,
    failed: bool,
}

#[derive(Template)]
#[template(path = "dashboard/notifications.html")]
struct NotificationsPage<'a> {
    me: &'a Me,
    release: &'a str,
    subscribed: bool,
    webhook: Option<(String, String)>,
    deliveries: Vec<DeliveryRow>,
    /// Why the webhook form was refused, shown above it with the URL typed (unless it may
    /// hold a password).
    error: Option<String>,
    typed: &'a str,
}

#[derive(Template)]
#[template(path = "dashboard/webhook_created.html")]
struct CreatedPage<'a> {
    me: &'a Me,
    url: &'a str,
    secret: &'a str,
}

/// A delivery as the page lists it; one to a webhook other than the org's `current` (since
/// replaced or removed) says so, since the page names only the current one.
fn row(d: crate::storage::Delivery, current: Option<i64>) -> DeliveryRow {
    let earlier = Some(d.webhook_id) != current;
    let body: Value = serde_json::from_str(&d.body).unwrap_or(Value::Null);
    let field = |f: &str| {
        body.get(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (state, failed) = match (d.delivered_at, d.next_attempt_at) {
        (Some(at), _) => (format!("delivered {}", when_micros(at)), false),
        (None, Some(at)) if d.attempts > 0 => (
            format!(
                "retrying at {} ({})",
                when_micros(at),
                d.last_error.unwrap_or_default()
            ),
            true,
        ),
        (None, Some(_)) => ("queued".to_string(), false),
        (None, None) => (
            format!("given up: {}", d.last_error.unwrap_or_default()),
            true,
        ),
    };
    let state = if earlier {
        format!("{state} (to an earlier webhook)")
    } else {
        state
    };
    let kind = field("type");
    let subject = match kind.as_str() {
        "bridge.outdated" => format!("{} runs {}", field("bridge"), field("version")),
        "alert.suspect" => {
            let alert = |k: &str| body["alert"][k].as_str().unwrap_or("").to_string();
            format!("{} alert \"{}\"", alert("service"), alert("title"))
        }
        _ => format!("release {}", field("release")),
    };
    DeliveryRow {
        time: when_micros(d.created_at),
        kind,
        subject,
        attempts: d.attempts,
        state,
        failed,
    }
}

/// `GET /integrations/notifications`.
pub async fn show(State(state): State<DashboardState>, me: Me) -> Response {
    show_page(&state, &me, None, "").await
}

/// The page; with `error`, the webhook form refused (422) and filled with the URL `typed`.
async fn show_page(
    state: &DashboardState,
    me: &Me,
    error: Option<String>,
    typed: &str,
) -> Response {
    let org_id = me.session.user.org_id;
    let (Ok(webhook), Ok(deliveries)) = (
        state.store.webhook(org_id).await,
        state.store.recent_deliveries(org_id, 20).await,
    ) else {
        return unavailable();
    };
    let current = webhook.as_ref().map(|w| w.id);
    let status = match error {
        Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
        None => StatusCode::OK,
    };
    page(
        status,
        &NotificationsPage {
            release: &state.release,
            subscribed: me.session.user.release_notices,
            // A webhook URL often carries a token: members see where it goes, not the path.
            webhook: webhook.map(|w| {
                let shown = if me.admin {
                    w.url
                } else {
                    crate::notify::origin_only(&w.url)
                };
                (shown, when_micros(w.created_at))
            }),
            deliveries: deliveries.into_iter().map(|d| row(d, current)).collect(),
            me,
            error,
            typed,
        },
    )
}

/// The subscription form's fields.
#[derive(Deserialize)]
pub struct SubscribeForm {
    #[serde(default)]
    csrf: String,
    on: Option<String>,
}

/// `POST /integrations/notifications/me`: turns the user's notice on (`on` sent) or off.
pub async fn subscribe(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<SubscribeForm>,
) -> Response {
    if !crate::secrets::same(&me.csrf, &form.csrf) {
        return csrf_refused();
    }
    let on = form.on.is_some();
    if state
        .store
        .set_release_notices(me.session.user.id, on)
        .await
        .is_err()
    {
        return unavailable();
    }
    Redirect::to("/integrations/notifications").into_response()
}

/// The webhook form's fields.
#[derive(Deserialize)]
pub struct WebhookForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    url: String,
    /// `yes` once the removal's question was answered.
    #[serde(default)]
    confirm: String,
}

/// `POST /integrations/notifications/webhook`: sets the org's webhook (admins), replacing any
/// previous one; the new signing secret is shown once.
pub async fn set_webhook(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<WebhookForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    // A literal address that deliveries would refuse is said now, not in every delivery.
    let checked = crate::notify::guard::webhook_url(&form.url, state.webhook_allow_private);
    let url = match checked {
        Ok(u) => u,
        Err(why) => {
            // A URL that may hold a password is not put back into the page.
            let typed = if form.url.contains('@') {
                ""
            } else {
                &form.url
            };
            // The field is named by the form itself.
            let why = format!(
                "Webhook URL not valid: {}",
                why.strip_prefix("url: ").unwrap_or(&why)
            );
            return show_page(&state, &me, Some(why), typed).await;
        }
    };
    let secret = crate::secrets::new_webhook_secret();
    let org_id = me.session.user.org_id;
    let stored = state
        .store
        .set_webhook(org_id, &url, &secret, &state.release)
        .await;
    if stored.is_err()
        || state
            .store
            .audit(
                org_id,
                &me.actor(),
                "webhook.set",
                // The origin only: a webhook's path or query often carries a token, and the
                // audit entry is logged too.
                &crate::notify::origin_only(&url),
            )
            .await
            .is_err()
    {
        return unavailable();
    }
    page(
        StatusCode::OK,
        &CreatedPage {
            me: &me,
            url: &url,
            secret: &secret,
        },
    )
}

/// `POST /integrations/notifications/webhook/remove`: removes the org's webhook (admins).
pub async fn remove_webhook(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<WebhookForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    // The question names the webhook; there is none to ask about once it is removed.
    let current = if form.confirm == "yes" {
        None
    } else {
        match state.store.webhook(me.session.user.org_id).await {
            Ok(Some(w)) => Some(crate::notify::origin_only(&w.url)),
            Ok(None) => return no_webhook(),
            Err(_) => return unavailable(),
        }
    };
    let text = format!(
        "Notifications stop going to {} now, and its signing secret is forgotten: setting it again makes a new secret, which the receiver must be given. This cannot be undone.",
        current.as_deref().unwrap_or("it")
    );
    let question = Confirm {
        heading: "Remove the org's webhook?",
        text: &text,
        action: "/integrations/notifications/webhook/remove",
        fields: &[],
        button: "Remove the webhook",
        back: "/integrations/notifications",
    };
    if let Some(asked) = question.unless_confirmed(&me, &form.confirm) {
        return asked;
    }
    let org_id = me.session.user.org_id;
    match state.store.remove_webhook(org_id).await {
        Ok(Some(url)) => {
            if state
                .store
                .audit(
                    org_id,
                    &me.actor(),
                    "webhook.remove",
                    &crate::notify::origin_only(&url),
                )
                .await
                .is_err()
            {
                return unavailable();
            }
            Redirect::to(&Done::WebhookRemoved.after("/integrations/notifications", "", &me.csrf))
                .into_response()
        }
        Ok(None) => no_webhook(),
        Err(_) => unavailable(),
    }
}

/// 404: the org has no webhook (removed already, a form sent again).
fn no_webhook() -> Response {
    message(
        StatusCode::NOT_FOUND,
        "No webhook",
        "Your org has no webhook to remove.",
        "/integrations/notifications",
        "Back to Notifications",
    )
}
