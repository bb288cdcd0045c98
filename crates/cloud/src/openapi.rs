//! The public HTTP API as an OpenAPI 3.1 document, generated from the handlers' own
//! `#[utoipa::path]` annotations and the types they answer with, and served at
//! `GET /v1/openapi.json`. A test checks every operation it lists against the routes the
//! server really has. The one pair of modules that name each other: this document lists the
//! handlers, and their annotations name the answer types written here (documentation only;
//! the handlers build their answers as JSON).

use axum::Router;
use axum::routing::get;
use serde::Serialize;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::problem::Problem;
use crate::signals::event::FieldError;

/// The document: every public operation, the schemas it uses, and the two ways to present an
/// API key (Bearer, or Basic with the key as the password).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Signals API and Bridge relay",
        description = "Events in (deployments, alerts, changes, custom), read back per org, and requests through the org's bridges. See docs/api.md and docs/bridge.md."
    ),
    paths(
        crate::api::ingest::post_signal,
        crate::api::events::list,
        crate::api::events::get,
        crate::api::health::livez,
        crate::api::health::readyz,
        crate::api::health::metrics,
        crate::relay::forward::routes::list,
        crate::relay::forward::routes::forward_api,
        crate::relay::forward::routes::forward_git,
        crate::relay::forward::routes::registry_base,
        crate::relay::forward::routes::forward_registry,
        crate::pgwire::upgrade::upgrade,
        crate::correlation::suspects,
        crate::correlation::cause::confirm_cause,
        crate::correlation::cause::read_cause,
        crate::correlation::cause::withdraw_cause,
        crate::correlation::dependencies::dependencies,
        crate::correlation::dependencies::set_dependencies,
        crate::correlation::dora::figures,
        crate::correlation::sources::list_sources,
        crate::correlation::sources::set_source,
        crate::correlation::sources::remove_source,
        crate::correlation::commits::deployment_commits,
        document,
    ),
    components(schemas(Problem, FieldError, Accepted, AcceptedBatch, AcceptedAnswer, EventPage, Unreadable, Bridges,
        Suspects, Suspect, CauseBody, CauseConfirmed, Dependencies, Dora, RepositorySourceBody,
        RepositorySources, DeploymentCommits)),
    modifiers(&ApiKeyAuth),
    security(("bearer" = []), ("basic" = []))
)]
pub struct ApiDoc;

/// Adds the security schemes the operations refer to.
struct ApiKeyAuth;

impl Modify for ApiKeyAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );
    }
}

/// The problems every authenticated read can answer with: listed once here, and named in
/// each operation's `responses(...)` beside its own.
#[derive(utoipa::IntoResponses)]
pub enum ReadProblems {
    /// A query parameter the operation does not take, or a bad value: the problem names it.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No API key, or not a live one.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// Storage unavailable (Retry-After).
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The problems of an operation that reads a JSON body (`PUT`, `POST`), besides its own.
#[derive(utoipa::IntoResponses)]
pub enum BodyProblems {
    /// A query parameter the operation does not take, or JSON that does not parse.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No API key, or not a live one.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The body stopped arriving.
    #[response(status = 408, content_type = "application/problem+json")]
    Timeout(Problem),
    /// Over 2 MiB.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// Not `application/json`.
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
    /// A field missing or invalid: the problem's `errors` name each.
    #[response(status = 422, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Storage unavailable, or bodies being read hold their memory bound (Retry-After).
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// `202` to one event.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The event's id (UUIDv7).
    pub id: String,
    /// Always `accepted`.
    pub status: String,
    /// When the server received it (RFC 3339, UTC, milliseconds).
    pub received_at: String,
}

/// `202`: [`Accepted`] to one event, [`AcceptedBatch`] to an array.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AcceptedAnswer {
    /// One event.
    One(Accepted),
    /// An array of events.
    Batch(AcceptedBatch),
}

/// `202` to an array of events.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedBatch {
    /// The events' ids, in the order sent.
    pub ids: Vec<String>,
    /// Always `accepted`.
    pub status: String,
    /// When the server received them.
    pub received_at: String,
}

/// A page of `GET /v1/events`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    /// The events, newest first: each as sent (normalised), with `id` and `receivedAt`.
    pub events: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
    /// Stored events that could not be read (storage damage), when there are any.
    pub unreadable: Option<Vec<Unreadable>>,
}

/// An event that could not be read back.
#[derive(Serialize, ToSchema)]
pub struct Unreadable {
    /// Its id.
    pub id: String,
    /// What failed.
    pub detail: String,
}

/// `GET /v1/bridges`.
#[derive(Serialize, ToSchema)]
pub struct Bridges {
    /// The org's connected bridges, each with its live instances.
    pub bridges: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// `GET /v1/alerts/{id}/suspects`.
#[derive(Serialize, ToSchema)]
pub struct Suspects {
    /// The alert, as `GET /v1/events/{id}` shows it.
    pub alert: serde_json::Map<String, serde_json::Value>,
    /// At most 5, best first.
    pub suspects: Vec<Suspect>,
    /// Deployments and changes of the window that could not be read (storage damage), when
    /// there are any: not ranked.
    pub unreadable: Option<Vec<Unreadable>>,
    /// When no deployment or change was a candidate: why the list is empty, and that
    /// environments match exactly.
    pub note: Option<String>,
}

/// One suspect of an alert.
#[derive(Serialize, ToSchema)]
pub struct Suspect {
    /// The deployment or change, as `GET /v1/events/{id}` shows it.
    pub event: serde_json::Map<String, serde_json::Value>,
    /// Why, strongest first (docs/correlation.md).
    pub reasons: Vec<String>,
    /// In [0, 1], rounded to 3 decimals.
    pub score: f64,
    /// It is the deployment confirmed as the alert's cause (`POST /v1/alerts/{id}/cause`),
    /// or another report of it (the confirmed `in_progress`, this its `success`).
    pub confirmed: bool,
}

/// The body of `POST /v1/alerts/{id}/cause`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CauseBody {
    /// The id of the deployment event that caused the alert.
    pub deployment_id: String,
}

/// The answer of `POST` and `GET /v1/alerts/{id}/cause`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CauseConfirmed {
    /// The alert.
    pub alert_id: String,
    /// Its confirmed cause.
    pub deployment_id: String,
}

/// A service's declared dependencies.
#[derive(Serialize, ToSchema)]
pub struct Dependencies {
    /// The service (in the answer).
    pub service: Option<String>,
    /// The services it depends on.
    pub dependencies: Vec<String>,
}

/// `GET /v1/dora`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dora {
    /// The service the figures are of, or null for all of them.
    pub service: Option<String>,
    /// The environment, or null for all of them.
    pub environment: Option<String>,
    /// The window's start, as compared (RFC 3339, UTC).
    pub since: String,
    /// The window's end, as compared (RFC 3339, UTC).
    pub until: String,
    /// `{"count": N, "perDay": x}`: successful deployments.
    pub deployment_frequency: serde_json::Map<String, serde_json::Value>,
    /// `{"p50", "p90", "count"}`: commit to successful deployment, seconds (null without data).
    pub change_lead_time_seconds: serde_json::Map<String, serde_json::Value>,
    /// Failed over finished deployments, null without any.
    pub change_fail_rate: Option<f64>,
    /// `{"p50", "p90", "count"}`: failed deployment to the next successful one, seconds.
    pub recovery_time_seconds: serde_json::Map<String, serde_json::Value>,
    /// True when the window holds deployments older than the newest 100,000 read: the figures
    /// leave those out.
    pub truncated: bool,
    /// When no deployment falls in the window: that the figures are empty, and that services
    /// and environments match exactly.
    pub note: Option<String>,
}

/// A repository mapped to the Git source that holds it (`PUT /v1/repository-sources`).
#[derive(Serialize, ToSchema)]
pub struct RepositorySourceBody {
    /// The repository as events name it (`acme/api`).
    pub repository: String,
    /// The bridge.
    pub bridge: String,
    /// The name of a `sources` entry of the bridge's config.
    pub source: String,
    /// The repository's path under the source's `url` (`acme/api.git`).
    pub path: String,
}

/// `GET /v1/repository-sources`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositorySources {
    /// Every mapping of the org, by repository.
    pub repository_sources: Vec<RepositorySourceBody>,
}

/// `GET /v1/deployments/{id}/commits`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentCommits {
    /// The deployment, as `GET /v1/events/{id}` shows it.
    pub deployment: serde_json::Map<String, serde_json::Value>,
    /// The newest earlier successful deployment of its service and environment that names a
    /// commit of the repository (null: none).
    pub previous: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where the commits were read.
    pub repository_source: RepositorySourceBody,
    /// Newest first: `{"sha", "author", "time", "subject", "files": [...]}`.
    pub commits: Vec<serde_json::Map<String, serde_json::Value>>,
    /// True when there were more than 250.
    pub truncated: bool,
    /// True when the list is the history up to the deployment's commit, not the commits since
    /// the previous one's: there is no previous deployment, or its commit is no longer in the
    /// repository (a rewritten history). Such a list dates no change lead time.
    pub whole_history: bool,
}

/// `GET /v1/openapi.json`: this document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json")))]
pub async fn document() -> axum::response::Response {
    axum::response::IntoResponse::into_response((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        ApiDoc::openapi().to_pretty_json().unwrap_or_default(),
    ))
}

/// The document's route (both listeners).
pub fn router() -> Router {
    Router::new().route("/v1/openapi.json", get(document))
}
