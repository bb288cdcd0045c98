//! Repositories: which Git source behind which bridge holds each repository the org's events
//! name, so that a deployment's page lists the commits it brought. Everyone sees the
//! mappings; admins set and remove them (audited), checked as `PUT /v1/repository-sources`
//! checks them.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::DashboardState;
use super::done::Done;
use super::form::Form;
use super::me::{Me, refuse_admin_form};
use super::render::{message, page, unavailable};
use crate::storage::RepositorySource;

#[derive(Template)]
#[template(path = "dashboard/repositories.html")]
struct RepositoriesPage<'a> {
    me: &'a Me,
    sources: Vec<RepositorySource>,
    /// Why the mapping form was refused, shown above it with what was typed, and the fields
    /// it names.
    error: Option<String>,
    invalid: Vec<&'static str>,
    /// The first field in the form's order that `invalid` names: it takes the focus, so that
    /// a keyboard or screen-reader user lands where the fix is.
    focus: Option<&'static str>,
    typed: &'a MappingForm,
}

/// The mapping form's fields, in the order the page shows them.
const FIELDS: [&str; 4] = ["repository", "bridge", "source", "path"];

/// `GET /integrations/repositories`.
pub async fn list(State(state): State<DashboardState>, me: Me) -> Response {
    list_page(&state, &me, None, &MappingForm::default()).await
}

/// The page, with the mapping form refused for `error` and filled with what was `typed`.
async fn list_page(
    state: &DashboardState,
    me: &Me,
    refused: Option<(String, Vec<&'static str>)>,
    typed: &MappingForm,
) -> Response {
    let status = match refused {
        Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
        None => StatusCode::OK,
    };
    let (error, invalid) = refused.map_or((None, Vec::new()), |(e, i)| (Some(e), i));
    match state.store.repository_sources(me.session.user.org_id).await {
        Ok(sources) => page(
            status,
            &RepositoriesPage {
                me,
                sources,
                error,
                focus: FIELDS.into_iter().find(|f| invalid.contains(f)),
                invalid,
                typed,
            },
        ),
        Err(_) => unavailable(),
    }
}

/// The mapping form's fields (removal sends only `repository`).
#[derive(Deserialize, Default)]
pub struct MappingForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    repository: String,
    #[serde(default)]
    bridge: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    path: String,
}

/// `POST /integrations/repositories`: maps a repository to a Git source (admins), replacing
/// an earlier mapping of it.
pub async fn set(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<MappingForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    let mapping = RepositorySource {
        repository: form.repository.trim().to_string(),
        bridge: form.bridge.trim().to_string(),
        source: form.source.trim().to_string(),
        path: form.path.trim().trim_start_matches('/').to_string(),
    };
    let problems = mapping.problems();
    if !problems.is_empty() {
        let why: Vec<String> = problems
            .iter()
            .map(|(field, rule)| format!("{field}: expected {rule}."))
            .collect();
        let why = format!("Mapping not valid. {}", why.join(" "));
        let invalid = problems.iter().map(|(field, _)| *field).collect();
        return list_page(&state, &me, Some((why, invalid)), &form).await;
    }
    let org_id = me.session.user.org_id;
    let undeclared = crate::live::undeclared_git_source(
        state.live.as_ref(),
        org_id,
        &mapping.bridge,
        &mapping.source,
    );
    if let Some(why) = undeclared {
        let why = format!("Mapping not valid. source: {why}.");
        return list_page(&state, &me, Some((why, vec!["source"])), &form).await;
    }
    let unlisted = crate::live::unlisted_repository(
        state.live.as_ref(),
        org_id,
        &mapping.bridge,
        &mapping.source,
        &mapping.path,
    );
    if let Some(why) = unlisted {
        let why = format!("Mapping not valid. path: {why}.");
        return list_page(&state, &me, Some((why, vec!["path"])), &form).await;
    }
    let what = format!(
        "{} -> {}/{}/{}",
        mapping.repository, mapping.bridge, mapping.source, mapping.path
    );
    let Ok(earlier) = state
        .store
        .repository_source(org_id, &mapping.repository)
        .await
    else {
        return unavailable();
    };
    if state
        .store
        .set_repository_source(org_id, &mapping)
        .await
        .is_err()
    {
        return unavailable();
    }
    if let Some(earlier) = earlier {
        state.insight.mapping_dropped(org_id, earlier);
    }
    if state
        .store
        .audit(org_id, &me.actor(), "repository_source.set", &what)
        .await
        .is_err()
    {
        return unavailable();
    }
    Redirect::to("/integrations/repositories").into_response()
}

/// `POST /integrations/repositories/remove`: forgets a mapping (admins).
pub async fn remove(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<MappingForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    let org_id = me.session.user.org_id;
    let Ok(mapped) = state
        .store
        .repository_source(org_id, &form.repository)
        .await
    else {
        return unavailable();
    };
    match state
        .store
        .remove_repository_source(org_id, &form.repository)
        .await
    {
        Ok(true) => {
            if let Some(mapped) = mapped {
                state.insight.mapping_dropped(org_id, mapped);
            }
            if state
                .store
                .audit(
                    org_id,
                    &me.actor(),
                    "repository_source.remove",
                    &form.repository,
                )
                .await
                .is_err()
            {
                return unavailable();
            }
            Redirect::to(&Done::MappingRemoved.after(
                "/integrations/repositories",
                &form.repository,
                &me.csrf,
            ))
            .into_response()
        }
        Ok(false) => message(
            StatusCode::NOT_FOUND,
            "No such mapping",
            "Your org maps no Git source for this repository.",
            "/integrations/repositories",
            "Back",
        ),
        Err(_) => unavailable(),
    }
}
