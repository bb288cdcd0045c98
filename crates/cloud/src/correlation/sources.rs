//! Which Git source holds each repository (docs/correlation.md, "Commits of a deployment"):
//! `PUT|GET|DELETE /v1/repository-sources` keep the org's mapping from the repository its
//! events name to a source behind one of its bridges, which [`super::commits`] reads through.

use axum::Extension;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::CorrelationState;
use super::request::{audit, json_body, shown};
use crate::auth::PeerAddr;
use crate::problem::{Problem, storage_unavailable};
use crate::signals::event::FieldError;
use crate::storage::{REPOSITORY_RULES, RepositorySource};

/// The org's repository mappings.
#[utoipa::path(get, path = "/v1/repository-sources", tag = "correlation",
    responses((status = 200, body = crate::openapi::RepositorySources),
        crate::openapi::ReadProblems))]
pub async fn list_sources(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    let sources = state
        .store
        .repository_sources(principal.org_id)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    Ok(Json(json!({ "repositorySources": sources })))
}

/// The shape of a mapping, for messages.
const SOURCE_SHAPE: &str = r#"{"repository", "bridge", "source", "path"}"#;

/// Checks a mapping's fields, naming each bad one.
pub fn validate_source(body: &Value) -> Result<RepositorySource, Vec<FieldError>> {
    if let Some(problem) = super::request::not_an_object(body, SOURCE_SHAPE) {
        return Err(vec![problem]);
    }
    let mut errors = Vec::new();
    let mut text = |name: &str| {
        let rule = REPOSITORY_RULES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |r| r.1);
        let detail = match body.get(name) {
            // Stored without surrounding whitespace, as events store the names they match.
            Some(Value::String(v)) => return v.trim().to_string(),
            None => format!("{name} is required: {rule}"),
            Some(other) => format!(
                "{name} must be a string, not {}: {rule}",
                super::request::kind_of(other)
            ),
        };
        errors.push(FieldError {
            pointer: format!("/{name}"),
            detail,
        });
        String::new()
    };
    let source = RepositorySource {
        repository: text("repository"),
        bridge: text("bridge"),
        source: text("source"),
        path: text("path"),
    };
    for (name, rule) in source.problems() {
        if body.get(name).is_some_and(Value::is_string) {
            let shown = shown(body[name].as_str().unwrap_or(""));
            errors.push(FieldError {
                pointer: format!("/{name}"),
                detail: format!("{shown} is not valid: expected {rule}"),
            });
        }
    }
    let known: Vec<&str> = REPOSITORY_RULES.iter().map(|(name, _)| *name).collect();
    errors.extend(super::request::unknown_fields(body, &known, SOURCE_SHAPE));
    errors.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    if errors.is_empty() {
        Ok(source)
    } else {
        Err(errors)
    }
}

/// `PUT /v1/repository-sources` with `{"repository", "bridge", "source", "path"}`: the Git
/// source that holds `repository` (replacing an earlier mapping of it).
#[utoipa::path(put, path = "/v1/repository-sources", tag = "correlation",
    request_body(content = crate::openapi::RepositorySourceBody, content_type = "application/json"),
    responses((status = 200, body = crate::openapi::RepositorySourceBody),
        crate::openapi::BodyProblems))]
pub async fn set_source(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    let body = json_body(
        body,
        r#"{"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"}"#,
    )?;
    let source = validate_source(&body).map_err(Problem::invalid)?;
    let undeclared = crate::live::undeclared_git_source(
        state.live.as_ref(),
        principal.org_id,
        &source.bridge,
        &source.source,
    );
    if let Some(detail) = undeclared {
        return Err(Problem::invalid(vec![FieldError {
            pointer: "/source".into(),
            detail,
        }]));
    }
    let unlisted = crate::live::unlisted_repository(
        state.live.as_ref(),
        principal.org_id,
        &source.bridge,
        &source.source,
        &source.path,
    );
    if let Some(detail) = unlisted {
        return Err(Problem::invalid(vec![FieldError {
            pointer: "/path".into(),
            detail,
        }]));
    }
    let earlier = state
        .store
        .repository_source(principal.org_id, &source.repository)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    state
        .store
        .set_repository_source(principal.org_id, &source)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let what = format!(
        "{} -> {}/{}/{}",
        source.repository, source.bridge, source.source, source.path
    );
    if let Some(earlier) = earlier {
        state.forget_unused_mirror(principal.org_id, earlier);
    }
    audit(&state, &principal, peer, "repository_source.set", &what).await?;
    Ok(Json(json!(source)))
}

/// The query of `DELETE /v1/repository-sources`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Which {
    repository: String,
}

/// `DELETE /v1/repository-sources?repository=acme/api`: forgets a mapping.
#[utoipa::path(delete, path = "/v1/repository-sources", tag = "correlation",
    params(("repository" = String, Query)),
    responses((status = 204, description = "Removed"),
        crate::openapi::ReadProblems,
        (status = 400, description = "repository missing, empty, repeated, or another parameter", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub async fn remove_source(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    query: Result<Query<Which>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::http::StatusCode, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    let Query(which) = query.map_err(|e| crate::query::query_problem(&e, &["repository"]))?;
    // Read without surrounding blanks, as `PUT` stores it.
    let repository = which.repository.trim();
    if repository.is_empty() {
        return Err(Problem::bad_request(
            "query parameter repository is empty; give the repository whose mapping to remove",
        ));
    }
    let mapped = state
        .store
        .repository_source(principal.org_id, repository)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let removed = state
        .store
        .remove_repository_source(principal.org_id, repository)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    if removed {
        if let Some(mapped) = mapped {
            state.forget_unused_mirror(principal.org_id, mapped);
        }
        audit(
            &state,
            &principal,
            peer,
            "repository_source.remove",
            repository,
        )
        .await?;
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(Problem::not_found(format!(
            "no Git source is mapped for repository {:?}",
            repository
        )))
    }
}

impl CorrelationState {
    /// Deletes the mirror of a mapping that was removed or replaced, in the background (a
    /// fetch into it may hold it for minutes), unless another mapping of the org reads the same
    /// repository (a mirror is named by bridge, source and path).
    pub fn forget_unused_mirror(&self, org_id: i64, old: RepositorySource) {
        let state = self.clone();
        tokio::spawn(async move {
            let same = |s: &RepositorySource| {
                (&s.bridge, &s.source, &s.path) == (&old.bridge, &old.source, &old.path)
            };
            let unused = || async {
                match state.store.repository_sources(org_id).await {
                    Ok(mappings) => !mappings.iter().any(same),
                    Err(e) => {
                        tracing::warn!(cause = %e, "cannot tell whether a repository's mirror is still used; it stays");
                        false
                    }
                }
            };
            state.mirrors.forget_if(org_id, &old, unused).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_field_of_the_wrong_type_is_said_as_such() {
        let body = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": 5});
        let errors = super::validate_source(&body).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].pointer, "/path");
        assert!(
            errors[0]
                .detail
                .starts_with("path must be a string, not a number"),
            "{}",
            errors[0].detail
        );
        let long = json!({"repository": "r".repeat(1024), "bridge": "dc1", "source": "code", "path": "a.git"});
        assert!(super::validate_source(&long).is_ok());
    }
}
