//! Integrations → Signals: the org's signal keys and API keys (never a secret after creation),
//! creating them (the new key shown once, with a ready `curl` and CI steps) and revoking them.
//! Members read; creating and revoking are admin actions (403 otherwise).

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::admin;
use crate::storage::{Credential, KeyInfo};

use super::DashboardState;
use super::confirm::Confirm;
use super::done::Done;
use super::form::Form;
use super::me::{Me, refuse_admin_form};
use super::render::{message, origin, own_ca_file, page, quoted, unavailable, when_micros};

/// One row of a key table.
struct Row {
    id: String,
    name: String,
    created: String,
    last_used: String,
}

#[derive(Template)]
#[template(path = "dashboard/signals.html")]
struct SignalsPage<'a> {
    me: &'a Me,
    admin: bool,
    base: &'a str,
    signal_keys: Vec<Row>,
    api_keys: Vec<Row>,
    /// Each create form's refusal and the name typed into it, shown again.
    signal_form: Typed,
    api_form: Typed,
}

/// A create form as it is shown: empty, or refused with what was typed.
#[derive(Default)]
struct Typed {
    error: Option<String>,
    name: String,
}

#[derive(Template)]
#[template(path = "dashboard/created.html")]
struct CreatedPage<'a> {
    me: &'a Me,
    what: &'a str,
    value: &'a str,
    secret: bool,
    /// What the commands below take from elsewhere, and where to get it.
    note: String,
    curl: String,
    github: String,
    gitlab: String,
}

fn rows(keys: Vec<KeyInfo>) -> Vec<Row> {
    keys.into_iter()
        .map(|k| Row {
            id: k.id,
            name: k.name.unwrap_or_default(),
            created: when_micros(k.created_at),
            last_used: k.last_used_at.map_or_else(|| "never".into(), when_micros),
        })
        .collect()
}

/// `GET /integrations/signals`.
pub async fn list(
    State(state): State<DashboardState>,
    me: Me,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    list_page(&state, &me, (&headers, &uri), None).await
}

/// The page; with `refused`, the create form of that kind refused with its error and the
/// name typed into it (422).
async fn list_page(
    state: &DashboardState,
    me: &Me,
    (headers, uri): (&HeaderMap, &Uri),
    refused: Option<(Credential, Typed)>,
) -> Response {
    let org_id = me.session.user.org_id;
    let (Ok(signal_keys), Ok(api_keys)) = (
        state.store.credentials(org_id, Credential::SignalKey).await,
        state.store.credentials(org_id, Credential::ApiKey).await,
    ) else {
        return unavailable();
    };
    let base = origin(state, headers, uri, state.secure);
    let status = match refused {
        Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
        None => StatusCode::OK,
    };
    let (mut signal_form, mut api_form) = (Typed::default(), Typed::default());
    match refused {
        Some((Credential::SignalKey, typed)) => signal_form = typed,
        Some((_, typed)) => api_form = typed,
        None => {}
    }
    page(
        status,
        &SignalsPage {
            admin: me.admin,
            me,
            base: &base,
            signal_keys: rows(signal_keys),
            api_keys: rows(api_keys),
            signal_form,
            api_form,
        },
    )
}

/// The create and revoke forms' fields.
#[derive(Deserialize)]
pub struct KeyForm {
    #[serde(default)]
    csrf: String,
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    id: String,
    /// `yes` once the revocation's question was answered.
    #[serde(default)]
    confirm: String,
}

fn kind(name: &str) -> Option<Credential> {
    match name {
        "signal-key" => Some(Credential::SignalKey),
        "api-key" => Some(Credential::ApiKey),
        _ => None,
    }
}

fn unknown_kind(name: &str) -> Response {
    message(
        StatusCode::BAD_REQUEST,
        "Unknown kind of key",
        &format!("kind must be signal-key or api-key, not {name:?}."),
        "/integrations/signals",
        "Back",
    )
}

/// `POST /integrations/signals/create`: a new key, shown once.
pub async fn create(
    State(state): State<DashboardState>,
    me: Me,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<KeyForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    let Some(kind) = kind(&form.kind) else {
        return unknown_kind(&form.kind);
    };
    let name = Some(form.name.trim()).filter(|n| !n.is_empty());
    let created = match kind {
        Credential::SignalKey => {
            admin::create_signal_key(&state.store, &me.actor(), &me.org, name).await
        }
        _ => admin::create_api_key(&state.store, &me.actor(), &me.org, name).await,
    };
    let value = match created {
        Ok(value) => value,
        Err(admin::AdminError::Usage(why)) => {
            let typed = Typed {
                error: Some(format!("Key not created: {why}")),
                name: form.name,
            };
            return list_page(&state, &me, (&headers, &uri), Some((kind, typed))).await;
        }
        Err(_) => return unavailable(),
    };
    tracing::info!(email = %me.email, org = %me.org, kind = %form.kind, "key created in the dashboard");
    let base = origin(&state, &headers, &uri, state.secure);
    // The commands name the key just made, and the other one as the org has it: a signal key
    // is an address, shown as it is (the newest); an API key is a secret, read from
    // SIGNALS_API_KEY, the name the CI snippets' secrets have too.
    let newest_signal_key = match kind {
        Credential::SignalKey => None,
        _ => state
            .store
            .credentials(me.session.user.org_id, Credential::SignalKey)
            .await
            .ok()
            .and_then(|keys| keys.into_iter().max_by_key(|k| k.created_at))
            .map(|k| k.id),
    };
    let (key, api, note) = match kind {
        Credential::SignalKey => (
            value.clone(),
            "$SIGNALS_API_KEY".to_string(),
            "The commands read an API key of this org from SIGNALS_API_KEY (create one on Integrations: Signals); in GitHub Actions and GitLab CI, store it as a secret or masked variable of that name.".to_string(),
        ),
        _ => match newest_signal_key {
            Some(signal_key) => (
                signal_key.clone(),
                value.clone(),
                format!("The commands post to this org's newest signal key, {signal_key}. In GitHub Actions and GitLab CI, store the API key as a secret or masked variable named SIGNALS_API_KEY, never in the file."),
            ),
            None => (
                "SIGNAL_KEY".to_string(),
                value.clone(),
                "This org has no signal key yet: create one on Integrations: Signals and put it where the commands say SIGNAL_KEY. In GitHub Actions and GitLab CI, store the API key as a secret or masked variable named SIGNALS_API_KEY, never in the file.".to_string(),
            ),
        },
    };
    let body = r#"{"type":"deployment","service":"api","environment":"production","status":"success","version":"v1.2.3"}"#;
    let cacert = own_ca_file(&state, &base)
        .map(|file| format!(" --cacert {}", quoted(file)))
        .unwrap_or_default();
    let curl = format!(
        "curl -sS{cacert} -X POST \"{base}/v1/signals/{key}\" \\\n  -H \"Authorization: Bearer {api}\" -H 'Content-Type: application/json' \\\n  -d '{body}'"
    );
    let github = format!(
        "- name: Tell Signals about the deployment\n  run: |\n    curl -sS -X POST \"{base}/v1/signals/{key}\" \\\n      -H \"Authorization: Bearer ${{{{ secrets.SIGNALS_API_KEY }}}}\" -H 'Content-Type: application/json' \\\n      -d \"{{\\\"type\\\":\\\"deployment\\\",\\\"service\\\":\\\"api\\\",\\\"environment\\\":\\\"production\\\",\\\"status\\\":\\\"success\\\",\\\"sha\\\":\\\"$GITHUB_SHA\\\",\\\"repository\\\":\\\"$GITHUB_REPOSITORY\\\"}}\""
    );
    let gitlab = format!(
        "notify-signals:\n  stage: .post\n  script:\n    - >\n      curl -sS -X POST \"{base}/v1/signals/{key}\"\n      -H \"Authorization: Bearer $SIGNALS_API_KEY\" -H 'Content-Type: application/json'\n      -d \"{{\\\"type\\\":\\\"deployment\\\",\\\"service\\\":\\\"api\\\",\\\"environment\\\":\\\"production\\\",\\\"status\\\":\\\"success\\\",\\\"sha\\\":\\\"$CI_COMMIT_SHA\\\",\\\"repository\\\":\\\"$CI_PROJECT_PATH\\\"}}\""
    );
    page(
        StatusCode::OK,
        &CreatedPage {
            me: &me,
            what: match kind {
                Credential::SignalKey => "Signal key",
                _ => "API key",
            },
            value: &value,
            secret: kind == Credential::ApiKey,
            note,
            curl,
            github,
            gitlab,
        },
    )
}

/// `POST /integrations/signals/revoke`: revokes a key; this server stops accepting it at
/// once, other servers on the same database within about a second.
pub async fn revoke(
    State(state): State<DashboardState>,
    me: Me,
    Form(form): Form<KeyForm>,
) -> Response {
    if let Some(answer) = refuse_admin_form(&me, &form.csrf) {
        return answer;
    }
    let Some(kind) = kind(&form.kind) else {
        return unknown_kind(&form.kind);
    };
    let (what, stops) = match kind {
        Credential::SignalKey => (
            "signal key",
            "Events posted to it are refused from now on (404, unknown signal key): pipelines and alerting that post to it stop being recorded until they post to another.",
        ),
        _ => (
            "API key",
            "Requests with it are refused from now on (401): pipelines, tools and git, registry or database clients that use it stop working until they get another.",
        ),
    };
    // A whole API key pasted as the id is asked about, and sent again, by its public part.
    let id = admin::shown_id(&form.id);
    // Nothing to ask about a key that is not live (revoked already, a form sent again).
    if form.confirm != "yes" {
        let Ok(keys) = state.store.credentials(me.session.user.org_id, kind).await else {
            return unavailable();
        };
        if !keys.iter().any(|k| k.id == id) {
            return no_such_key(&format!(
                "org {:?} has no live key {id}; {}",
                me.org,
                admin::LIST_HINT
            ));
        }
    }
    let question = Confirm {
        heading: &format!("Revoke {what} {id}?"),
        text: &format!("{stops} This cannot be undone."),
        action: "/integrations/signals/revoke",
        fields: &[("kind", &form.kind), ("id", &id)],
        button: &format!("Revoke the {what}"),
        back: "/integrations/signals",
    };
    if let Some(asked) = question.unless_confirmed(&me, &form.confirm) {
        return asked;
    }
    match admin::revoke_key(&state.store, &me.actor(), &me.org, kind, &form.id).await {
        Ok(done) => {
            // This process stops accepting the key now; others within about a second. The
            // form's text may be a whole key: only what was revoked (its id) is logged.
            state.keys.forget_all();
            tracing::info!(email = %me.email, org = %me.org, what = %done, "key revoked in the dashboard");
            Redirect::to(&Done::KeyRevoked.after("/integrations/signals", &id, &me.csrf))
                .into_response()
        }
        Err(admin::AdminError::Usage(why)) => no_such_key(&why),
        Err(_) => unavailable(),
    }
}

/// 404: no live key has that id.
fn no_such_key(why: &str) -> Response {
    message(
        StatusCode::NOT_FOUND,
        "No such key",
        &why.replace(
            admin::LIST_HINT,
            "the tables on Integrations: Signals list the ids",
        ),
        "/integrations/signals",
        "Back to Integrations: Signals",
    )
}
