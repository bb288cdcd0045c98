//! The pages: sign-in, set-password (from a one-time link), the org's home, sign-out. Every
//! form is a POST with a CSRF token; answers are HTML pages, never JSON.

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::auth::PeerAddr;

use super::session::{self, CSRF_COOKIE, SESSION_COOKIE};
use super::{DashboardState, password};

#[derive(Template)]
#[template(path = "dashboard/sign_in.html")]
struct SignInPage<'a> {
    csrf: &'a str,
    email: &'a str,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "dashboard/set_password.html")]
struct SetPasswordPage<'a> {
    csrf: &'a str,
    token: &'a str,
    email: &'a str,
    org: &'a str,
    min_chars: usize,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "dashboard/home.html")]
struct HomePage<'a> {
    me: &'a Me,
}

/// The signed-in user, as every signed-in page shows them (and the CSRF token of their forms).
pub struct Me {
    /// The org's slug.
    pub org: String,
    /// The user's email.
    pub email: String,
    /// admin or member.
    pub role: &'static str,
    /// The session's CSRF token.
    pub csrf: String,
    /// Whether the user may manage.
    pub admin: bool,
    /// The session, for storage calls.
    pub session: crate::storage::Session,
    /// The client's IP address, for the audit.
    pub address: String,
    /// The release notice this user asked for, when a connected bridge is outdated.
    pub notice: Option<String>,
}

impl Me {
    /// Who acts, for the audit.
    pub fn actor(&self) -> crate::storage::Actor {
        crate::storage::Actor {
            who: self.email.clone(),
            address: self.address.clone(),
        }
    }
}

/// A handler that takes a [`Me`] runs only for a signed-in user; anyone else is sent to
/// sign-in (503 when storage fails).
impl axum::extract::FromRequestParts<DashboardState> for Me {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &DashboardState,
    ) -> Result<Self, Self::Rejection> {
        let mut me = me(state, &parts.headers).await?;
        if let Some(peer) = parts.extensions.get::<PeerAddr>() {
            me.address = peer.0.ip().to_string();
        }
        if me.session.user.release_notices {
            me.notice = release_notice(state, me.session.user.org_id);
        }
        Ok(me)
    }
}

/// The notice of outdated bridges: how many instances run an older release, and which.
fn release_notice(state: &DashboardState, org_id: i64) -> Option<String> {
    let behind: Vec<String> = state
        .live
        .instances(org_id)
        .into_iter()
        .filter(|i| crate::live::outdated(&i.version, &state.release))
        .map(|i| format!("{} {}", i.bridge, i.version))
        .collect();
    if behind.is_empty() {
        return None;
    }
    Some(format!(
        "Bridge release {} is available: {} connected instance(s) run an older release ({}). See Integrations: Bridge to upgrade.",
        state.release,
        behind.len(),
        behind.join(", ")
    ))
}

/// The signed-in user of this request, or the answer to give instead: to sign-in when there
/// is no session, 503 when storage fails.
pub async fn me(state: &DashboardState, headers: &HeaderMap) -> Result<Me, Response> {
    match session::current(&state.store, headers).await {
        Ok(Some((s, _))) => Ok(Me {
            org: s.user.org.clone(),
            email: s.user.email.clone(),
            role: s.user.role.as_str(),
            csrf: s.csrf.clone(),
            admin: s.user.role == crate::storage::Role::Admin,
            session: s,
            address: "unknown".into(),
            notice: None,
        }),
        Ok(None) => Err(Redirect::to("/sign-in").into_response()),
        Err(_) => Err(unavailable()),
    }
}

/// `None` for an admin with the form's right CSRF token; else the 403 page to answer.
pub fn refuse_admin_form(me: &Me, csrf: &str) -> Option<Response> {
    if !session::same(&me.csrf, csrf) {
        return Some(csrf_refused());
    }
    if !me.admin {
        tracing::warn!(email = %me.email, org = %me.org, "refused: an admin action by a member");
        return Some(message(
            StatusCode::FORBIDDEN,
            "Admins only",
            "Your role is member: members read, admins manage. Ask an admin of your org.",
            "/",
            "Back to the dashboard",
        ));
    }
    None
}

#[derive(Template)]
#[template(path = "dashboard/message.html")]
struct MessagePage<'a> {
    heading: &'a str,
    text: &'a str,
    link: &'a str,
    link_text: &'a str,
}

/// A rendered page with its status.
pub fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(cause = %e, "cannot render a dashboard page");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot render the page").into_response()
        }
    }
}

/// A page that says what happened and where to go.
pub fn message(
    status: StatusCode,
    heading: &str,
    text: &str,
    link: &str,
    link_text: &str,
) -> Response {
    page(
        status,
        &MessagePage {
            heading,
            text,
            link,
            link_text,
        },
    )
}

/// 503: storage failed.
pub fn unavailable() -> Response {
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Storage unavailable",
        "The service cannot reach its database right now. Try again in a moment.",
        "/",
        "Try again",
    )
}

/// 403: the form's CSRF token is missing or wrong.
pub fn csrf_refused() -> Response {
    message(
        StatusCode::FORBIDDEN,
        "Form expired",
        "This form was not sent from a page of this dashboard, or it is too old (CSRF check). Reload the page and send it again.",
        "/",
        "Back to the dashboard",
    )
}

/// The pre-session CSRF token: the cookie's, or a new one (with the cookie to set).
fn pre_session_csrf(headers: &HeaderMap, secure: bool) -> (String, Option<HeaderValue>) {
    match session::cookie(headers, CSRF_COOKIE) {
        Some(v) if v.len() == 43 => (v.to_string(), None),
        _ => {
            let (token, _) = password::new_secret();
            let cookie =
                session::set_cookie(CSRF_COOKIE, &token, "Strict", session::ABSOLUTE, secure);
            (token, Some(cookie))
        }
    }
}

fn pre_session_csrf_ok(headers: &HeaderMap, sent: &str) -> bool {
    session::cookie(headers, CSRF_COOKIE).is_some_and(|c| session::same(c, sent))
}

fn with_cookie(mut response: Response, cookie: Option<HeaderValue>) -> Response {
    if let Some(c) = cookie {
        response.headers_mut().append(header::SET_COOKIE, c);
    }
    response
}

/// `GET /`: the org's home when signed in, else to the sign-in page.
pub async fn home(me: Me) -> Response {
    page(StatusCode::OK, &HomePage { me: &me })
}

/// The address for the commands the pages show: `--public-url` when set, else the one the
/// page was reached at (`https://HOST` over TLS, else `http://HOST`), and `CLOUD_HOST` when
/// the request named no usable host.
pub fn origin(state: &DashboardState, headers: &HeaderMap, tls: bool) -> String {
    if let Some(url) = &state.public_url {
        return url.clone();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .unwrap_or("CLOUD_HOST");
    format!("{}://{host}", if tls { "https" } else { "http" })
}

/// A stored time (µs) as pages show it: `2026-11-26 14:03:12 UTC`.
pub fn when_micros(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// `GET /sign-in`.
pub async fn sign_in_form(State(state): State<DashboardState>, headers: HeaderMap) -> Response {
    let (csrf, cookie) = pre_session_csrf(&headers, state.secure);
    let form = SignInPage {
        csrf: &csrf,
        email: "",
        error: None,
    };
    with_cookie(page(StatusCode::OK, &form), cookie)
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub struct SignIn {
    #[serde(default)]
    csrf: String,
    email: String,
    password: String,
}

/// `POST /sign-in`: a session on the right password, else the form again (401), or 429 while
/// the account or the address is throttled.
pub async fn sign_in(
    State(state): State<DashboardState>,
    peer: Option<axum::Extension<PeerAddr>>,
    headers: HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    if !pre_session_csrf_ok(&headers, &form.csrf) {
        return csrf_refused();
    }
    let email = form.email.trim().to_lowercase();
    let address = peer.map(|p| p.0.0.ip());
    let again = |status: StatusCode, error: &str| {
        page(
            status,
            &SignInPage {
                csrf: &form.csrf,
                email: &email,
                error: Some(error),
            },
        )
    };
    if let Some(wait) = state.throttle.blocked(&email, address) {
        tracing::warn!(email = %email, address = ?address, "sign-in refused: too many failures");
        let minutes = wait.as_secs().div_ceil(60).max(1);
        let mut response = again(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("Too many failed sign-ins. Try again in {minutes} minute(s)."),
        );
        if let Ok(v) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return response;
    }
    let user = match state.store.user_by_email(&email).await {
        Ok(u) => u,
        Err(_) => return unavailable(),
    };
    let stored = user.as_ref().and_then(|u| u.password_hash.clone());
    let typed = form.password.clone();
    let ok = tokio::task::spawn_blocking(move || password::verify(&typed, stored.as_deref()))
        .await
        .unwrap_or(false);
    let Some(user) = user.filter(|_| ok) else {
        state.throttle.failed(&email, address);
        tracing::warn!(email = %email, address = ?address, "sign-in failed: wrong email or password");
        return again(StatusCode::UNAUTHORIZED, "Wrong email or password.");
    };
    state.throttle.succeeded(&email);
    match session::start(&state.store, user.id).await {
        Ok(id) => {
            tracing::info!(email = %email, org = %user.org, address = ?address, "signed in");
            signed_in(&id, state.secure)
        }
        Err(_) => unavailable(),
    }
}

/// A redirect home with the new session's cookie.
fn signed_in(session_id: &str, secure: bool) -> Response {
    let mut response = Redirect::to("/").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(SESSION_COOKIE, session_id, "Lax", session::ABSOLUTE, secure),
    );
    response
}

/// `?token=` of a set-password link.
#[derive(Deserialize)]
pub struct LinkQuery {
    token: Option<String>,
}

fn link_gone() -> Response {
    message(
        StatusCode::GONE,
        "Link used or expired",
        "This set-password link was already used or has expired. Ask an admin for a new one (cloud user reset-password --email …).",
        "/sign-in",
        "Sign in",
    )
}

/// `GET /set-password?token=…`: the form, while the link is valid.
pub async fn set_password_form(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<LinkQuery>,
) -> Response {
    let token = q.token.unwrap_or_default();
    let user = match state
        .store
        .password_link_user(&password::secret_hash(&token))
        .await
    {
        Ok(Some(u)) => u,
        Ok(None) => return link_gone(),
        Err(_) => return unavailable(),
    };
    let (csrf, cookie) = pre_session_csrf(&headers, state.secure);
    let form = SetPasswordPage {
        csrf: &csrf,
        token: &token,
        email: &user.email,
        org: &user.org,
        min_chars: password::MIN_PASSWORD_CHARS,
        error: None,
    };
    let mut response = with_cookie(page(StatusCode::OK, &form), cookie);
    // The link's secret is in this page's URL: never send it on as a Referer.
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The set-password form's fields.
#[derive(Deserialize)]
pub struct SetPassword {
    #[serde(default)]
    csrf: String,
    token: String,
    password: String,
    confirm: String,
}

/// `POST /set-password`: sets the password, ends the user's other sessions and signs in.
pub async fn set_password(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Form(form): Form<SetPassword>,
) -> Response {
    if !pre_session_csrf_ok(&headers, &form.csrf) {
        return csrf_refused();
    }
    let token_hash = password::secret_hash(&form.token);
    let user = match state.store.password_link_user(&token_hash).await {
        Ok(Some(u)) => u,
        Ok(None) => return link_gone(),
        Err(_) => return unavailable(),
    };
    if let Err(why) = password::check_new(&form.password, &form.confirm) {
        let again = SetPasswordPage {
            csrf: &form.csrf,
            token: &form.token,
            email: &user.email,
            org: &user.org,
            min_chars: password::MIN_PASSWORD_CHARS,
            error: Some(&why),
        };
        return page(StatusCode::UNPROCESSABLE_ENTITY, &again);
    }
    let typed = form.password.clone();
    let Ok(Ok(hash)) = tokio::task::spawn_blocking(move || password::hash(&typed)).await else {
        return message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Password not set",
            "The password could not be hashed. Try again.",
            "/",
            "Back",
        );
    };
    match state.store.use_password_link(&token_hash, &hash).await {
        Ok(Some(user_id)) => {
            tracing::info!(email = %user.email, org = %user.org, "password set from a link");
            match session::start(&state.store, user_id).await {
                Ok(id) => signed_in(&id, state.secure),
                Err(_) => unavailable(),
            }
        }
        Ok(None) => link_gone(),
        Err(_) => unavailable(),
    }
}

/// The sign-out form's fields.
#[derive(Deserialize)]
pub struct SignOut {
    #[serde(default)]
    csrf: String,
    everywhere: Option<String>,
}

/// `POST /sign-out`: ends this session, or every session of the user with `everywhere`.
pub async fn sign_out(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Form(form): Form<SignOut>,
) -> Response {
    let (s, id_hash) = match session::current(&state.store, &headers).await {
        Ok(Some(found)) => found,
        Ok(None) => return Redirect::to("/sign-in").into_response(),
        Err(_) => return unavailable(),
    };
    if !session::same(&s.csrf, &form.csrf) {
        return csrf_refused();
    }
    let ended = if form.everywhere.is_some() {
        state.store.end_sessions(s.user.id).await
    } else {
        state.store.end_session(&id_hash).await
    };
    if ended.is_err() {
        return unavailable();
    }
    let mut response = Redirect::to("/sign-in").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(
            SESSION_COOKIE,
            "",
            "Lax",
            std::time::Duration::ZERO,
            state.secure,
        ),
    );
    response
}
