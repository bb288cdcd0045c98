//! Services: the last deployment of each service in each environment (its version, status and
//! time), linking to the deployment's event.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::DashboardState;
use super::me::Me;
use super::render::{page, unavailable, when_micros};

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

/// Weeks shown on a service's page.
const WEEKS: u32 = 12;

#[derive(Template)]
#[template(path = "dashboard/service.html")]
struct ServicePage<'a> {
    me: &'a Me,
    service: &'a str,
    environment: &'a str,
    /// The query of the same figures from `GET /v1/dora`, percent-encoded so that it can be
    /// copied as it reads (a service named `c++` or `a&b` included).
    api_query: String,
    frequency: String,
    lead: String,
    fail_rate: String,
    recovery: String,
    charts: Vec<(&'static str, String)>,
    /// The services this one depends on (declared through the API).
    dependencies: Vec<String>,
    /// Whether any event names this service (in the environment, when one is given): a name
    /// typed wrong, or in another case, shows zeros that would read as an idle service.
    known: bool,
}

/// `?environment=` of a service's page.
#[derive(serde::Deserialize)]
pub struct Scope {
    #[serde(default)]
    environment: String,
}

/// Seconds as people read durations.
fn duration(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 90.0 * 60.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if seconds < 48.0 * 3600.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} days", seconds / 86_400.0)
    }
}

/// `GET /services/{service}`: the four DORA figures over 12 weeks, and each week's as charts.
pub async fn detail(
    State(state): State<DashboardState>,
    me: Me,
    super::extract::Path(service): super::extract::Path<String>,
    super::extract::Query(scope): super::extract::Query<Scope>,
) -> Response {
    let environment = Some(scope.environment.trim()).filter(|e| !e.is_empty());
    let org_id = me.session.user.org_id;
    let probe = crate::storage::EventQuery {
        service: Some(service.clone()),
        environment: environment.map(str::to_string),
        limit: 1,
        ..Default::default()
    };
    let (Some((weeks, whole)), Ok(dependencies), Ok(named)) = (
        state
            .insight
            .weekly_dora(org_id, &service, environment, WEEKS)
            .await,
        state.store.dependencies(org_id, &service).await,
        state.store.list_events(org_id, &probe).await,
    ) else {
        return unavailable();
    };
    let labels: Vec<String> = weeks
        .iter()
        .map(|w| {
            w["since"]
                .as_str()
                .unwrap_or("")
                .get(..10)
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let series = |f: &dyn Fn(&Value) -> Option<f64>| weeks.iter().map(f).collect::<Vec<_>>();
    let p50 = |v: &Value, key: &str| v[key]["p50"].as_f64();
    let charts = vec![
        (
            "Deployments per week",
            super::charts::bars(
                "Deployments per week",
                &labels,
                &series(&|w| w["deploymentFrequency"]["count"].as_f64()),
                |v| format!("{v:.0}"),
            ),
        ),
        (
            "Change lead time (median)",
            super::charts::bars(
                "Change lead time, median",
                &labels,
                &series(&|w| p50(w, "changeLeadTimeSeconds")),
                duration,
            ),
        ),
        (
            "Change fail rate",
            super::charts::bars(
                "Change fail rate",
                &labels,
                &series(&|w| w["changeFailRate"].as_f64()),
                |v| format!("{:.0}%", v * 100.0),
            ),
        ),
        (
            "Recovery time (median)",
            super::charts::bars(
                "Failed deployment recovery time, median",
                &labels,
                &series(&|w| p50(w, "recoveryTimeSeconds")),
                duration,
            ),
        ),
    ];
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "no data".into());
    page(
        StatusCode::OK,
        &ServicePage {
            me: &me,
            service: &service,
            environment: environment.unwrap_or(""),
            api_query: {
                let mut query = url::form_urlencoded::Serializer::new(String::new());
                query.append_pair("service", &service);
                if let Some(environment) = environment.filter(|e| !e.is_empty()) {
                    query.append_pair("environment", environment);
                }
                query.append_pair("since", &text(&whole, "since"));
                query.append_pair("until", &text(&whole, "until"));
                query.finish()
            },
            frequency: format!(
                "{} ({} per day){}",
                whole["deploymentFrequency"]["count"],
                whole["deploymentFrequency"]["perDay"],
                match whole["truncated"].as_bool() {
                    Some(true) => ", of the newest 100,000 deployments only",
                    _ => "",
                }
            ),
            lead: or_none(p50(&whole, "changeLeadTimeSeconds").map(duration)),
            fail_rate: or_none(
                whole["changeFailRate"]
                    .as_f64()
                    .map(|r| format!("{:.0}%", r * 100.0)),
            ),
            recovery: or_none(p50(&whole, "recoveryTimeSeconds").map(duration)),
            charts,
            dependencies,
            known: !named.is_empty(),
        },
    )
}
