//! What changed in a deploy (docs/correlation.md, "Commits of a deployment"): the org maps
//! each repository its events name to a Git source behind a bridge
//! (`PUT|GET|DELETE /v1/repository-sources`), and `GET /v1/deployments/{id}/commits` lists
//! the commits between the previous deployment of that service and environment and this one,
//! read through the bridge by [`super::mirror`] and kept, so each is listed once.

use axum::Extension;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use chrono::DateTime;
use serde_json::{Value, json};

use super::mirror::{self, GitError};
use super::request::{audit, json_body};
use super::{CorrelationState, parse};
use crate::auth::PeerAddr;
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::signals::event::FieldError;
use crate::storage::{ListedCommits, REPOSITORY_RULES, RepositorySource};

/// The org's repository mappings.
#[utoipa::path(get, path = "/v1/repository-sources", tag = "correlation",
    responses((status = 200, body = crate::openapi::RepositorySources),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json")))]
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

/// Checks a mapping's fields, naming each bad one.
pub fn validate_source(body: &Value) -> Result<RepositorySource, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut text = |name: &str| {
        let rule = REPOSITORY_RULES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |r| r.1);
        let detail = match body.get(name) {
            Some(Value::String(v)) => return v.to_string(),
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
            errors.push(FieldError {
                pointer: format!("/{name}"),
                detail: format!(
                    "{:?} is not valid: expected {rule}",
                    body[name].as_str().unwrap_or("")
                ),
            });
        }
    }
    let known: Vec<&str> = REPOSITORY_RULES.iter().map(|(name, _)| *name).collect();
    errors.extend(super::request::unknown_fields(
        body,
        &known,
        r#"{"repository", "bridge", "source", "path"}"#,
    ));
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
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json")))]
pub async fn set_source(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    let body = json_body(
        body,
        r#"{"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"}"#,
    )?;
    let source = validate_source(&body).map_err(Problem::invalid)?;
    state
        .store
        .set_repository_source(principal.org_id, &source)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let what = format!(
        "{} -> {}/{}/{}",
        source.repository, source.bridge, source.source, source.path
    );
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
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub async fn remove_source(
    State(state): State<CorrelationState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    query: Result<Query<Which>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::http::StatusCode, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    let Query(which) = query.map_err(|e| crate::query::query_problem(&e, &["repository"]))?;
    let removed = state
        .store
        .remove_repository_source(principal.org_id, &which.repository)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    if removed {
        audit(
            &state,
            &principal,
            peer,
            "repository_source.remove",
            &which.repository,
        )
        .await?;
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(Problem::not_found(format!(
            "no Git source is mapped for repository {:?}",
            which.repository
        )))
    }
}

/// The commits a deployment brought: between the previous deployment of its service and
/// environment (the last successful one naming a commit of the same repository) and this one.
#[utoipa::path(get, path = "/v1/deployments/{id}/commits", tag = "correlation",
    params(("id" = String, Path, description = "A deployment's event id")),
    responses((status = 200, body = crate::openapi::DeploymentCommits),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The deployment has no sha or repository, its sha is not a commit id, its repository is not mapped, or it is mapped to a bridge the org has no token for", body = Problem, content_type = "application/problem+json"),
        (status = 502, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
pub async fn deployment_commits(
    State(state): State<CorrelationState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    crate::query::no_query(&uri)?;
    Ok(Json(commits_of(&state, principal.org_id, &id).await?))
}

/// `GET /v1/deployments/{id}/commits`'s answer for the org's deployment `id`.
pub async fn commits_of(state: &CorrelationState, org_id: i64, id: &str) -> Result<Value, Problem> {
    let failed = |e: crate::storage::StorageError| storage_unavailable(&e);
    let stored = state
        .store
        .event(org_id, id)
        .await
        .map_err(failed)?
        .ok_or_else(|| Problem::not_found(format!("no event {id:?} in this org")))?;
    let (body, fields) = parse(&stored)?;
    if fields.kind != "deployment" {
        return Err(Problem::not_found(format!(
            "event {id:?} is {}, not a deployment: commits are listed for deployments",
            super::article(&fields.kind)
        )));
    }
    let (Some(repository), Some(sha)) = (&fields.repository, &fields.sha) else {
        return Err(Problem::conflict(format!(
            "deployment {id:?} names no repository and sha; send both with deployments to list their commits"
        )));
    };
    if !mirror::is_commit_id(sha) {
        return Err(Problem::conflict(format!(
            "deployment {id:?} has sha {sha:?}, which is not {}",
            mirror::COMMIT_ID_RULE
        )));
    }
    let source = state
        .store
        .repository_source(org_id, repository)
        .await
        .map_err(failed)?
        .ok_or_else(|| Problem::conflict(format!(
            "no Git source is mapped for repository {repository:?}; map one with PUT /v1/repository-sources (docs/correlation.md)"
        )))?;
    let previous = match (&fields.service, &fields.environment) {
        (Some(service), Some(environment)) => state
            .store
            .previous_deployment(
                org_id,
                (service, environment, repository),
                (fields.at, &stored.id),
            )
            .await
            .map_err(failed)?,
        _ => None,
    };
    let previous = previous.map(|e| parse(&e)).transpose()?;
    let previous_sha = previous
        .as_ref()
        .and_then(|(_, f)| f.sha.clone())
        .filter(|s| mirror::is_commit_id(s));
    let listed = state
        .store
        .listed_commits(org_id, id)
        .await
        .map_err(failed)?;
    let where_from = source.place();
    let fresh = |l: &ListedCommits| l.previous_sha == previous_sha && l.source == where_from;
    let commits: Value = match listed.filter(fresh) {
        Some(l) => serde_json::from_str(&l.commits).unwrap_or_default(),
        None => {
            // Spawned, so that a caller who goes away does not cut a fetch short.
            let (mirrors, place, from, to) = (
                state.mirrors.clone(),
                source.clone(),
                previous_sha.clone(),
                sha.clone(),
            );
            let listing =
                tokio::spawn(
                    async move { mirrors.commits(org_id, &place, from.as_deref(), &to).await },
                )
                .await
                .map_err(|_| {
                    Problem::internal("listing the commits stopped unexpectedly; retry")
                })?;
            let listing = match listing {
                Ok(listing) => listing,
                Err(e) => return Err(git_problem(state, org_id, &e, &source).await),
            };
            // Only an exact list dates the change lead time: a whole history would make it
            // as old as the repository.
            let first = listing
                .commits
                .iter()
                .filter(|_| listing.complete)
                .filter_map(|c| DateTime::parse_from_rfc3339(&c.time).ok())
                .map(|t| t.timestamp_micros())
                .min();
            let list = json!({"commits": listing.commits, "truncated": listing.truncated});
            let keep = ListedCommits {
                previous_sha: previous_sha.clone(),
                commits: list.to_string(),
                repository: repository.clone(),
                source: where_from.clone(),
            };
            state
                .store
                .keep_commits(org_id, id, &keep, first)
                .await
                .map_err(failed)?;
            list
        }
    };
    Ok(json!({
        "deployment": body,
        "previous": previous.map(|(b, _)| b),
        "repositorySource": source,
        "commits": commits["commits"],
        "truncated": commits["truncated"],
    }))
}

/// A suspect's reason from the commits listed for it: how many, and the top-level paths
/// they touched ("3 commits since the previous deployment, touching payments/ and README.md").
pub fn summary(listed: &str) -> Option<String> {
    let list: Value = serde_json::from_str(listed).ok()?;
    let commits = list["commits"].as_array()?;
    let n = commits.len();
    if n == 0 {
        return None;
    }
    let mut places: Vec<&str> = Vec::new();
    let files = commits
        .iter()
        .filter_map(|c| c["files"].as_array())
        .flatten()
        .filter_map(Value::as_str);
    for file in files {
        let place = match file.find('/') {
            Some(slash) => &file[..=slash],
            None => file,
        };
        if !places.contains(&place) {
            places.push(place);
        }
    }
    let many = if n == 1 { "" } else { "s" };
    let touching = match places.as_slice() {
        [] => String::new(),
        [one] => format!(", touching {one}"),
        [a, b] => format!(", touching {a} and {b}"),
        [a, b, c] => format!(", touching {a}, {b} and {c}"),
        [a, b, c, rest @ ..] => format!(", touching {a}, {b}, {c} and {} more", rest.len()),
    };
    Some(format!(
        "{n} commit{many} since the previous deployment{touching}"
    ))
}

/// A Git failure as the API reports it, naming the bridge and source.
async fn git_problem(
    state: &CorrelationState,
    org_id: i64,
    e: &GitError,
    source: &RepositorySource,
) -> Problem {
    let (bridge, name, path) = (&source.bridge, &source.source, &source.path);
    match e {
        GitError::Http { status: 503 } => Problem::unavailable(
            5,
            format!(
                "bridge {bridge:?} has no live tunnel, so the commits cannot be read; start the bridge and retry"
            ),
        ),
        // The relay answers 404 for a bridge the org never had as for a missing source: the
        // mapping's bridge is the first thing to check.
        GitError::Http { status: 404 }
            if matches!(
                state.store.bridge_tokens_count(org_id, bridge).await,
                Ok((0, _))
            ) =>
        {
            Problem::conflict(format!(
                "repository {:?} is mapped to bridge {bridge:?}, which this org has no token for; fix the mapping (PUT /v1/repository-sources) or create the bridge (`cloud bridge-token create --org ORG --name {bridge}`)",
                source.repository
            ))
        }
        GitError::Http { status: 404 } => Problem::bad_gateway(format!(
            "bridge {bridge:?} has no Git source {name:?} serving {path:?}; check the mapping (PUT /v1/repository-sources) and the bridge's sources"
        )),
        GitError::MissingCommit(sha) => Problem::bad_gateway(format!(
            "commit {sha} is not in {path:?} (source {name:?} on bridge {bridge:?}); check the deployment's sha and the mapping's path"
        )),
        other => {
            tracing::warn!(bridge = %bridge, source = %name, cause = %other, "cannot list a deployment's commits");
            Problem::bad_gateway(format!(
                "cannot read {path:?} through source {name:?} on bridge {bridge:?}: {other}"
            ))
        }
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
