//! A service's declared dependencies (`GET`/`PUT /v1/services/{service}/dependencies`): an
//! alert on a service also suspects the deployments of the services it depends on.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::CorrelationState;
use super::request::{self, json_body};
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::signals::event::FieldError;

/// Most dependencies of one service.
const MAX_DEPENDENCIES: usize = 100;
/// Most entries read in one list, repeats included.
const MAX_ENTRIES: usize = 1_000;

/// The services `service` depends on (declared with PUT).
#[utoipa::path(get, path = "/v1/services/{service}/dependencies", tag = "correlation",
    params(("service" = String, Path)),
    responses((status = 200, body = crate::openapi::Dependencies),
        crate::openapi::ReadProblems))]
pub async fn dependencies(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    PathParams(service): PathParams<String>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    let service = service_name(&service)?;
    let list = state
        .store
        .dependencies(principal.org_id, &service)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    Ok(Json(json!({"service": service, "dependencies": list})))
}

/// `PUT /v1/services/{service}/dependencies` with `{"dependencies": ["payments-api", …]}`:
/// replaces the services `service` depends on (in every environment).
#[utoipa::path(put, path = "/v1/services/{service}/dependencies", tag = "correlation",
    params(("service" = String, Path)),
    request_body(content = crate::openapi::Dependencies, content_type = "application/json"),
    responses((status = 200, body = crate::openapi::Dependencies),
        crate::openapi::BodyProblems))]
pub async fn set_dependencies(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    PathParams(service): PathParams<String>,
    uri: axum::http::Uri,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    const SHAPE: &str = r#"{"dependencies": ["service-name", …]}"#;
    let service = service_name(&service)?;
    let body = json_body(body, SHAPE)?;
    if let Some(problem) = request::not_an_object(&body, SHAPE) {
        return Err(Problem::invalid(vec![problem]));
    }
    let mut errors = Vec::new();
    let mut list: Vec<String> = Vec::new();
    match body.get("dependencies").map(|v| (v, v.as_array())) {
        None => errors.push(FieldError {
            pointer: "/dependencies".into(),
            detail: "dependencies is required: an array of service names".into(),
        }),
        Some((other, None)) => errors.push(FieldError {
            pointer: "/dependencies".into(),
            detail: format!(
                "dependencies must be an array of service names, not {}",
                request::kind_of(other)
            ),
        }),
        // Repeats count once, but a list far longer than any real one is refused unread.
        Some((_, Some(items))) if items.len() > MAX_ENTRIES => errors.push(FieldError {
            pointer: "/dependencies".into(),
            detail: format!(
                "{} entries; at most {MAX_ENTRIES} (of at most {MAX_DEPENDENCIES} different names)",
                items.len()
            ),
        }),
        Some((_, Some(items))) => {
            for (i, item) in items.iter().enumerate() {
                match dependency(item, &service) {
                    Ok(name) if list.iter().any(|n| n == name) => {}
                    Ok(name) => list.push(name.to_string()),
                    Err(detail) => errors.push(FieldError {
                        pointer: format!("/dependencies/{i}"),
                        detail,
                    }),
                }
            }
            if list.len() > MAX_DEPENDENCIES {
                errors.push(FieldError {
                    pointer: "/dependencies".into(),
                    detail: format!(
                        "at most {MAX_DEPENDENCIES} dependencies, not {} different names",
                        list.len()
                    ),
                });
            }
        }
    }
    errors.extend(request::unknown_fields(
        &body,
        &["dependencies"],
        r#"{"dependencies": [...]}"#,
    ));
    if !errors.is_empty() {
        return Err(Problem::invalid(errors));
    }
    list.sort();
    state
        .store
        .set_dependencies(principal.org_id, &service, &list)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    Ok((
        StatusCode::OK,
        Json(json!({"service": service, "dependencies": list})),
    ))
}

/// Longest service name, in bytes: as long as an event's `service` may be.
const MAX_NAME: usize = crate::signals::validate::MAX_SHORT;

/// The path's service without surrounding whitespace (as events store it), when an event could
/// name it (at most [`MAX_NAME`] bytes).
fn service_name(service: &str) -> Result<String, Problem> {
    let service = service.trim();
    if service.is_empty() {
        return Err(Problem::bad_request(
            "the service in the path is blank; name a service, as an event's service does",
        ));
    }
    if service.len() > MAX_NAME {
        return Err(Problem::bad_request(format!(
            "the service in the path is {} bytes; at most {MAX_NAME}, as an event's service",
            service.len()
        )));
    }
    Ok(service.to_string())
}

/// One entry of the list: the name of another service, or what is wrong with it.
fn dependency<'a>(item: &'a Value, service: &str) -> Result<&'a str, String> {
    let Some(name) = item.as_str().map(str::trim) else {
        return Err(format!(
            "expected a service name (a string), not {}",
            request::kind_of(item)
        ));
    };
    if item.as_str() == Some("") {
        Err("a service name cannot be empty".into())
    } else if name.is_empty() {
        Err("a service name cannot be blank (whitespace only)".into())
    } else if name.len() > MAX_NAME {
        Err(format!(
            "a service name is at most {MAX_NAME} bytes; this one is {}",
            name.len()
        ))
    } else if name == service.trim() {
        Err(format!("{service:?} cannot depend on itself"))
    } else {
        Ok(name)
    }
}
