//! What changed in a deploy (docs/correlation.md, "Commits of a deployment"):
//! `GET /v1/deployments/{id}/commits` lists the commits between the previous deployment of that
//! service and environment and this one, read by [`super::mirror`] through the Git source that
//! [`super::sources`] maps the repository to, and kept, so each is listed once.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use chrono::DateTime;
use serde_json::{Value, json};

use super::mirror::{self, GitError};
use super::{CorrelationState, parse};
use crate::problem::{PathParams, Problem, storage_unavailable};
use crate::storage::{ListedCommits, RepositorySource};

/// The commits a deployment brought: between the previous deployment of its service and
/// environment (the last successful one naming a commit of the same repository) and this one.
#[utoipa::path(get, path = "/v1/deployments/{id}/commits", tag = "correlation",
    params(("id" = String, Path, description = "A deployment's event id")),
    responses((status = 200, body = crate::openapi::DeploymentCommits),
        crate::openapi::ReadProblems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The deployment has no sha or repository, its sha is not a commit id or not in the repository, its repository is not mapped, or it is mapped to a bridge the org has no (live) token for or to a source or path the bridge does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "The bridge or the Git server failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Storage unavailable, or the bridge has no live tunnel (Retry-After)", body = Problem, content_type = "application/problem+json")))]
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
        let missing = match (&fields.repository, &fields.sha) {
            (None, None) => "no repository and no sha",
            (None, _) => "no repository",
            _ => "no sha",
        };
        return Err(Problem::conflict(format!(
            "deployment {id:?} names {missing}; send both repository and sha with deployments to list their commits"
        )));
    };
    if !mirror::is_commit_id(sha) {
        return Err(Problem::mismatch(format!(
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
    // A list kept before lists said whether they are the whole history is listed again once
    // when it had a previous commit to start from: it may have been the whole history.
    let kept = listed
        .filter(fresh)
        .and_then(|l| serde_json::from_str::<Value>(&l.commits).ok())
        .filter(|v| previous_sha.is_none() || v.get("wholeHistory").is_some());
    let commits: Value = match kept {
        Some(list) => list,
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
                .filter(|_| listing.complete())
                .filter_map(|c| DateTime::parse_from_rfc3339(&c.time).ok())
                .map(|t| t.timestamp_micros())
                .min();
            let list = json!({
                "commits": listing.commits,
                "truncated": listing.truncated,
                "wholeHistory": listing.whole_history,
            });
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
    let whole_history = whole_history(&commits, previous_sha.as_deref());
    Ok(json!({
        "deployment": body,
        "previous": previous.map(|(b, _)| b),
        "repositorySource": source,
        "commits": commits["commits"],
        "truncated": commits["truncated"],
        "wholeHistory": whole_history,
    }))
}

/// Whether a kept list is the history up to the deployment's commit, not the commits since
/// the previous one's. A list kept before lists said so has no `wholeHistory`: taken as whole
/// when there was no previous commit to start from (the answer lists one with a previous
/// commit again; a suspect's reason may still read it).
fn whole_history(list: &Value, previous_sha: Option<&str>) -> bool {
    list["wholeHistory"]
        .as_bool()
        .unwrap_or(previous_sha.is_none())
}

/// A suspect's reason from the commits listed for it: how many, and the top-level paths
/// they touched ("3 commits since the previous deployment, touching payments/ and README.md").
/// A list cut at its limit says "more than"; a whole history up to the commit (no previous
/// deployment, or its commit rewritten away) says why instead of "since the previous
/// deployment".
pub fn summary(listed: &ListedCommits) -> Option<String> {
    let list: Value = serde_json::from_str(&listed.commits).ok()?;
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
    let more = if list["truncated"] == true {
        "more than "
    } else {
        ""
    };
    let since = match (
        &listed.previous_sha,
        whole_history(&list, listed.previous_sha.as_deref()),
    ) {
        (_, false) => "since the previous deployment",
        (None, true) => "in its history (no previous deployment)",
        (Some(_), true) => {
            "in its history (the previous deployment's commit is not in the repository)"
        }
    };
    let touching = match places.as_slice() {
        [] => String::new(),
        [one] => format!(", touching {one}"),
        [a, b] => format!(", touching {a} and {b}"),
        [a, b, c] => format!(", touching {a}, {b} and {c}"),
        [a, b, c, rest @ ..] => format!(", touching {a}, {b}, {c} and {} more", rest.len()),
    };
    Some(format!("{more}{n} commit{many} {since}{touching}"))
}

/// Whether a `404`'s words are the relay's or the bridge's: the relay's for a source the bridge
/// does not declare (`bridge "dc1" declares no Git source …`), the bridge's for a path outside
/// the source's `repositories` (`… reachable through this bridge …`) or under a
/// one-repository source (`… is one repository …`).
fn refused_by_bridge(said: &str) -> bool {
    [
        " declares no ",
        "reachable through this bridge",
        " is one repository (its url ends in .git)",
    ]
    .iter()
    .any(|words| said.contains(words))
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
        // No tunnel because every token of the bridge was revoked: starting it cannot help.
        GitError::Http { status: 503, .. }
            if matches!(
                state.store.bridge_tokens_count(org_id, bridge).await,
                Ok((all, 0)) if all > 0
            ) =>
        {
            Problem::conflict(format!(
                "repository {:?} is mapped to bridge {bridge:?}, whose tokens are all revoked; give the bridge a new token (`cloud bridge-token create --org ORG --name {bridge}`) or fix the mapping (PUT /v1/repository-sources)",
                source.repository
            ))
        }
        GitError::Http { status: 503, .. } => Problem::unavailable(
            5,
            format!(
                "bridge {bridge:?} has no live tunnel, so the commits cannot be read; start the bridge and retry"
            ),
        ),
        // The relay answers 404 for a bridge the org never had as for a missing source: the
        // mapping's bridge is the first thing to check.
        GitError::Http { status: 404, .. }
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
        // The mapping or the deployment names what is not there: the caller's data to fix,
        // not a failure of the bridge.
        // The bridge refused the path by a rule of the entry: the mapping's, or the entry's, to fix.
        GitError::Http { status: 403, said } => Problem::conflict(format!(
            "bridge {bridge:?} refuses {path:?} through source {name:?}: {}; check the mapping (PUT /v1/repository-sources) and the source's allow rules",
            if said.is_empty() { "403" } else { said }
        )),
        // The relay's and the bridge's own refusals (a source not declared, a path outside its
        // repositories) name the bridge; any other 404 is the Git server's, whatever its words
        // ("Repository not found."): it has no such repository.
        GitError::Http { status: 404, said } if !refused_by_bridge(said) => {
            Problem::conflict(format!(
                "the Git server behind source {name:?} on bridge {bridge:?} has no repository {path:?}; check the mapping's path (PUT /v1/repository-sources) and the source's url"
            ))
        }
        GitError::Http { status: 404, said } => Problem::conflict(format!(
            "bridge {bridge:?} does not serve {path:?} through source {name:?}: {said}; check the mapping (PUT /v1/repository-sources) and the bridge's sources"
        )),
        GitError::MissingCommit(sha) => Problem::mismatch(format!(
            "commit {sha} is not in {path:?} (source {name:?} on bridge {bridge:?}); check the deployment's sha and the mapping's path"
        )),
        other => {
            tracing::warn!(org_id, repository = %source.repository, bridge = %bridge, source = %name, path = %path, cause = %other, "cannot list a deployment's commits");
            // The cloud's own directories are its operator's, in its log: the caller is told
            // no internal path.
            let why = match other {
                GitError::Dir { .. } => {
                    "the cloud cannot keep or read its copy of the repository (its log says why; its operator can fix it)".to_string()
                }
                GitError::Http { status, said } if *status >= 500 && !said.is_empty() => {
                    format!("the relay answered {status}: {said}")
                }
                GitError::Http { status, .. } if *status >= 500 => format!(
                    "the bridge answered {status}: it could not reach the Git server, or the server failed (the bridge's log, and `bridge check` on its host, say which)"
                ),
                other => other.to_string(),
            };
            Problem::bad_gateway(format!(
                "cannot read {path:?} through source {name:?} on bridge {bridge:?}: {why}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forges_404_is_the_servers_and_the_bridges_refusals_are_its_own() {
        for server in [
            "",
            "Repository not found.",
            "The project you were looking for could not be found",
        ] {
            assert!(!refused_by_bridge(server), "{server}");
        }
        for bridge in [
            "bridge \"dc1\" declares no Git source named \"cdoe\" in its `sources` list",
            "source \"code\" has no repository \"x.git\" reachable through this bridge (see the entry's repositories)",
            "source \"one\" is one repository (its url ends in .git): clone …/git/one itself, with no path after it",
        ] {
            assert!(refused_by_bridge(bridge), "{bridge}");
        }
    }

    fn listed(previous: Option<&str>, files: &[&str], truncated: bool) -> ListedCommits {
        let commits: Vec<Value> = files.iter().map(|f| json!({"files": [f]})).collect();
        ListedCommits {
            previous_sha: previous.map(str::to_string),
            commits: json!({"commits": commits, "truncated": truncated}).to_string(),
            repository: "acme/api".into(),
            source: "dc1/code/acme/api.git".into(),
        }
    }

    #[test]
    fn the_reason_says_how_the_list_was_made() {
        let two = ["payments/refund.rs", "README.md"];
        assert_eq!(
            summary(&listed(Some("abc1234"), &two, false)).as_deref(),
            Some("2 commits since the previous deployment, touching payments/ and README.md")
        );
        assert_eq!(
            summary(&listed(None, &two, false)).as_deref(),
            Some(
                "2 commits in its history (no previous deployment), touching payments/ and README.md"
            )
        );
        assert_eq!(
            summary(&listed(Some("abc1234"), &two, true)).as_deref(),
            Some(
                "more than 2 commits since the previous deployment, touching payments/ and README.md"
            )
        );
        assert_eq!(summary(&listed(Some("abc1234"), &[], false)), None);
        // The previous deployment's commit was rewritten away: the list is the whole history.
        let mut rewritten = listed(Some("abc1234"), &two, false);
        rewritten.commits = json!({"commits": [{"files": ["README.md"]}], "truncated": false, "wholeHistory": true}).to_string();
        assert_eq!(
            summary(&rewritten).as_deref(),
            Some(
                "1 commit in its history (the previous deployment's commit is not in the repository), touching README.md"
            )
        );
    }
}
