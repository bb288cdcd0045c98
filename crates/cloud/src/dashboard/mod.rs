//! The dashboard (docs/dashboard.md): server-rendered pages under `/` on both listeners, for
//! people rather than programs: sign-in (users made by `cloud user create`, one-time
//! set-password links, Argon2id passwords, server-side sessions, CSRF tokens on every form,
//! sign-in throttling, strict security headers), the events timeline and the services' last
//! deployments, the org's signal keys and API keys, its bridges with their tokens and live
//! instances, release notifications (a notice, an org webhook), the repositories mapped to Git
//! sources (a deployment's commits) and the org's audit. It owns
//! its router and state; it does not use the API's or the relay's handlers.

mod audit;
mod bridges;
mod cause;
mod charts;
mod confirm;
mod done;
mod event_page;
mod events;
mod extract;
mod form;
mod me;
mod notifications;
mod pages;
pub mod password;
mod render;
mod repositories;
mod services;
mod session;
mod signals;
mod throttle;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::auth::KeyCache;
use crate::insight::Insight;
use crate::live::LiveBridges;
use crate::storage::Store;

pub use throttle::Throttle;

/// The dashboard's state: storage, the live tunnels, the verified-key cache (emptied when a
/// key is revoked here), the sign-in throttle (shared by both listeners), the bridge release
/// this cloud ships, `--public-url`, and whether this listener is TLS (cookies are `Secure`
/// there).
#[derive(Clone)]
pub struct DashboardState {
    store: Store,
    live: Arc<dyn LiveBridges>,
    insight: Arc<dyn Insight>,
    keys: Arc<KeyCache>,
    throttle: Arc<Throttle>,
    release: Arc<str>,
    public_url: Option<String>,
    tls_port: u16,
    own_ca: Option<crate::tls::OwnCa>,
    webhook_allow_private: bool,
    secure: bool,
}

/// What the dashboard is built from.
pub struct DashboardParts {
    /// Storage.
    pub store: Store,
    /// The relay's live tunnels.
    pub live: Arc<dyn LiveBridges>,
    /// Correlation's suspects and DORA figures.
    pub insight: Arc<dyn Insight>,
    /// The verified-key cache the API and the relay share.
    pub keys: Arc<KeyCache>,
    /// The bridge release this cloud ships (`--bridge-release`).
    pub release: String,
    /// `--public-url`: the base of the commands the pages show.
    pub public_url: Option<String>,
    /// The TLS listener's port, which bridges dial.
    pub tls_port: u16,
    /// The cloud's own CA file, when its certificate is that CA's (`--cacert` in commands).
    pub own_ca: Option<crate::tls::OwnCa>,
    /// `--webhook-allow-private`.
    pub webhook_allow_private: bool,
}

impl DashboardState {
    /// The state of a service; [`DashboardState::over_tls`] picks the listener.
    pub fn new(parts: DashboardParts) -> Self {
        DashboardState {
            store: parts.store,
            live: parts.live,
            insight: parts.insight,
            keys: parts.keys,
            throttle: Arc::new(Throttle::default()),
            release: parts.release.into(),
            public_url: parts
                .public_url
                .map(|u| u.trim_end_matches('/').to_string()),
            tls_port: parts.tls_port,
            own_ca: parts.own_ca,
            webhook_allow_private: parts.webhook_allow_private,
            secure: false,
        }
    }

    /// The same state for the TLS listener (`true`) or the plain one.
    pub fn over_tls(&self, tls: bool) -> Self {
        DashboardState {
            secure: tls,
            ..self.clone()
        }
    }
}

/// The stylesheet, compiled in: the dashboard loads nothing from elsewhere.
const APP_CSS: &str = include_str!("../../assets/app.css");
/// The one script: live updates of marked parts of a page (pages work without it).
const LIVE_JS: &str = include_str!("../../assets/live.js");

async fn script(headers: axum::http::HeaderMap) -> Response {
    asset(&headers, "text/javascript; charset=utf-8", LIVE_JS)
}

async fn stylesheet(headers: axum::http::HeaderMap) -> Response {
    asset(&headers, "text/css; charset=utf-8", APP_CSS)
}

/// A compiled-in asset, checked again at each use (`no-cache` with an `ETag` of its content:
/// a `304` while unchanged), so a browser never runs the previous release's script or style
/// after an upgrade.
fn asset(
    headers: &axum::http::HeaderMap,
    content_type: &'static str,
    body: &'static str,
) -> Response {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(body.as_bytes());
    let tag = crate::secrets::hex(&digest[..8]);
    let etag = format!("\"{tag}\"");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let head = [
        (header::CACHE_CONTROL, "no-cache".to_string()),
        (header::ETAG, etag),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, head).into_response();
    }
    (head, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Every dashboard answer: no framing, no inline script or style, nothing from another
/// origin, no Referer to other sites, and no caching of pages that show a session's data.
async fn security_headers(request: Request, next: Next) -> Response {
    with_security_headers(next.run(request).await)
}

/// [`security_headers`] on one answer.
fn with_security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.entry(header::REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("same-origin"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The page for an address no route has, for a browser that asked for a page (the API's
/// clients get problem+json from the app's fallback).
pub fn not_found(path: &str) -> Response {
    with_security_headers(render::message(
        axum::http::StatusCode::NOT_FOUND,
        "Page not found",
        &format!("The dashboard has no page at {path}."),
        "/",
        "Back to the dashboard",
    ))
}

/// A refusal made before a dashboard handler ran (`crate::inputs`), as a page.
pub fn problem_page(problem: crate::problem::Problem) -> Response {
    let status = axum::http::StatusCode::from_u16(problem.status)
        .unwrap_or(axum::http::StatusCode::BAD_REQUEST);
    with_security_headers(render::message(
        status,
        problem.title,
        &problem.detail,
        "/",
        "Back to the dashboard",
    ))
}

/// A form's own address asked for with GET (a bookmark, a reload after its answer, a
/// sign-in's `next`): the page the form is on, not a `405` in JSON.
async fn back(to: &'static str) -> Redirect {
    Redirect::to(to)
}

/// A cause form's address asked for with GET: the event's page.
async fn back_to_event(axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    cause::back_to_event(&id)
}

/// The dashboard's routes.
pub fn router(state: DashboardState) -> Router {
    Router::new()
        .route("/", get(pages::home))
        .route("/sign-in", get(pages::sign_in_form).post(pages::sign_in))
        .route(
            "/set-password",
            get(pages::set_password_form).post(pages::set_password),
        )
        .route(
            "/sign-out",
            axum::routing::post(pages::sign_out).get(|| back("/")),
        )
        .route("/events", get(events::timeline))
        .route("/events/{id}", get(event_page::detail))
        .route(
            "/events/{id}/cause",
            axum::routing::post(cause::confirm_cause).get(back_to_event),
        )
        .route(
            "/events/{id}/cause/withdraw",
            axum::routing::post(cause::withdraw_cause).get(back_to_event),
        )
        .route("/integrations/signals", get(signals::list))
        .route(
            "/integrations/signals/create",
            axum::routing::post(signals::create).get(|| back("/integrations/signals")),
        )
        .route(
            "/integrations/signals/revoke",
            axum::routing::post(signals::revoke).get(|| back("/integrations/signals")),
        )
        .route("/integrations/bridge", get(bridges::list))
        .route(
            "/integrations/bridge/create",
            axum::routing::post(bridges::create).get(|| back("/integrations/bridge")),
        )
        .route(
            "/integrations/bridge/revoke",
            axum::routing::post(bridges::revoke).get(|| back("/integrations/bridge")),
        )
        .route("/services", get(services::list))
        .route("/services/{service}", get(services::detail))
        .route("/integrations/notifications", get(notifications::show))
        .route(
            "/integrations/notifications/me",
            axum::routing::post(notifications::subscribe)
                .get(|| back("/integrations/notifications")),
        )
        .route(
            "/integrations/notifications/webhook",
            axum::routing::post(notifications::set_webhook)
                .get(|| back("/integrations/notifications")),
        )
        .route(
            "/integrations/notifications/webhook/remove",
            axum::routing::post(notifications::remove_webhook)
                .get(|| back("/integrations/notifications")),
        )
        .route(
            "/integrations/repositories",
            get(repositories::list).post(repositories::set),
        )
        .route(
            "/integrations/repositories/remove",
            axum::routing::post(repositories::remove).get(|| back("/integrations/repositories")),
        )
        .route("/audit", get(audit::list))
        .route("/assets/app.css", get(stylesheet))
        .route("/assets/live.js", get(script))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}
