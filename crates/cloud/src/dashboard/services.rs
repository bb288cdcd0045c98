//! Services: the last deployment of each service in each environment (its version, status and
//! time), linking to the deployment's event.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::DashboardState;
use super::pages::{Me, page, unavailable, when_micros};

/// The most service/environment pairs shown.
const MOST: i64 = 500;

struct Row {
    id: String,
    service: String,
    environment: String,
    version: String,
    status: String,
    time: String,
}

#[derive(Template)]
#[template(path = "dashboard/services.html")]
struct ServicesPage<'a> {
    me: &'a Me,
    services: Vec<Row>,
}

fn text(body: &Value, field: &str) -> String {
    body.get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// `GET /services`.
pub async fn list(State(state): State<DashboardState>, me: Me) -> Response {
    let Ok(found) = state
        .store
        .last_deployments(me.session.user.org_id, MOST)
        .await
    else {
        return unavailable();
    };
    let services = found
        .into_iter()
        .map(|e| {
            let body: Value = serde_json::from_str(&e.body).unwrap_or(Value::Null);
            Row {
                service: text(&body, "service"),
                environment: text(&body, "environment"),
                version: text(&body, "version"),
                status: text(&body, "status"),
                time: when_micros(e.occurred_at),
                id: e.id,
            }
        })
        .collect();
    page(StatusCode::OK, &ServicesPage { me: &me, services })
}
