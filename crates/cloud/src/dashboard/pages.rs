//! The pages: sign-in, set-password (from a one-time link), the org's home, sign-out. Every
//! form is a POST with a CSRF token; answers are HTML pages, never JSON.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::auth::PeerAddr;

use super::extract::Query;
use super::form::Form;
use super::me::{Me, local_path};
use super::render::{csrf_refused, message, page, unavailable};
use super::session::{self, CSRF_COOKIE, SESSION_COOKIE};
use super::{DashboardState, password};

#[derive(Template)]
#[template(path = "dashboard/sign_in.html")]
struct SignInPage<'a> {
    csrf: &'a str,
    email: &'a str,
    error: Option<&'a str>,
    /// Why the user is here again, when a form came without a session.
    notice: Option<&'a str>,
    /// Where to go once signed in (a path of this site; empty: home).
    next: &'a str,
}

/// What the sign-in page says to a user whose form arrived after the session ended.
const UNSAVED: &str = "Your session ended before your form arrived (it expired, or you signed out), so nothing was saved. Sign in, then send the form again.";

/// `?next=` of the sign-in page, and `unsaved` when a form arrived without a session.
#[derive(Deserialize)]
pub struct Next {
    #[serde(default)]
    next: String,
    #[serde(default)]
    unsaved: Option<String>,
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
/// The pre-session CSRF token: the cookie's, or a new one (with the cookie to set).
fn pre_session_csrf(headers: &HeaderMap, secure: bool) -> (String, Option<HeaderValue>) {
    match session::cookie(headers, CSRF_COOKIE) {
        Some(v) if v.len() == 43 => (v.to_string(), None),
        _ => {
            let (token, _) = crate::secrets::new_secret();
            let cookie =
                session::set_cookie(CSRF_COOKIE, &token, "Strict", session::ABSOLUTE, secure);
            (token, Some(cookie))
        }
    }
}

fn pre_session_csrf_ok(headers: &HeaderMap, sent: &str) -> bool {
    session::cookie(headers, CSRF_COOKIE).is_some_and(|c| crate::secrets::same(c, sent))
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
/// `GET /sign-in`.
pub async fn sign_in_form(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    super::extract::Query(next): super::extract::Query<Next>,
) -> Response {
    let (csrf, cookie) = pre_session_csrf(&headers, state.secure);
    let form = SignInPage {
        csrf: &csrf,
        email: "",
        error: None,
        notice: next.unsaved.is_some().then_some(UNSAVED),
        next: local_path(&next.next).unwrap_or(""),
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
    #[serde(default)]
    next: String,
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
    let shown_address = address.map_or_else(|| "unknown".to_string(), |a| a.to_string());
    let again = |status: StatusCode, error: &str| {
        page(
            status,
            &SignInPage {
                csrf: &form.csrf,
                email: &email,
                error: Some(error),
                notice: None,
                next: local_path(&form.next).unwrap_or(""),
            },
        )
    };
    let attempt = match state.throttle.admit(&email, address) {
        Ok(attempt) => attempt,
        Err(wait) => {
            // The email typed is not logged before it is known to be an account's: people
            // type passwords into the email field.
            tracing::warn!(address = %shown_address, "sign-in refused: too many failures");
            let minutes = wait.as_secs().div_ceil(60).max(1);
            let mut response = again(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "Too many failed sign-ins. Try again in {minutes} minute{}.",
                    if minutes == 1 { "" } else { "s" }
                ),
            );
            if let Ok(v) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return response;
        }
    };
    let user = match state.store.user_by_email(&email).await {
        Ok(u) => u,
        Err(_) => return unavailable(),
    };
    let stored = user.as_ref().and_then(|u| u.password_hash.clone());
    let ok = password::verify_off_thread(form.password.clone(), stored).await;
    let known = user.is_some();
    let Some(user) = user.filter(|_| ok) else {
        attempt.failed();
        if known {
            tracing::warn!(email = %email, address = %shown_address, "sign-in failed: wrong email or password");
        } else {
            tracing::warn!(address = %shown_address, "sign-in failed: no account has the email typed");
        }
        return again(StatusCode::UNAUTHORIZED, "Wrong email or password.");
    };
    let vouched = user.password_hash.clone().unwrap_or_default();
    match session::start(&state.store, user.id, &vouched).await {
        Ok(Some(id)) => {
            attempt.succeeded();
            tracing::info!(email = %email, org = %user.org, address = %shown_address, "signed in");
            signed_in(&id, state.secure, local_path(&form.next).unwrap_or("/"))
        }
        // The password was set again between the check and the session: the one typed is old.
        Ok(None) => {
            attempt.failed();
            tracing::warn!(email = %email, address = %shown_address, "sign-in failed: the password changed while it was checked");
            again(StatusCode::UNAUTHORIZED, "Wrong email or password.")
        }
        Err(_) => unavailable(),
    }
}

/// A redirect to `to` (home, or the page that sent the user to sign in) with the new
/// session's cookie.
fn signed_in(session_id: &str, secure: bool, to: &str) -> Response {
    let mut response = Redirect::to(to).into_response();
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
        "This set-password link was already used, replaced by a newer one, or has expired. Ask an admin for a new one (cloud user reset-password --email …).",
        "/sign-in",
        "Sign in",
    )
}

/// The page for a link whose token is not whole (cut when copied, most likely, not used or
/// expired; or with characters after it or in it), or `None` for a token of the right shape.
fn link_incomplete(token: &str) -> Option<Response> {
    let want = crate::secrets::SECRET_CHARS;
    let whole = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if token.len() == want && token.bytes().all(whole) {
        return None;
    }
    let chars = token.chars().count();
    let (heading, what) = if chars == want {
        (
            "Link damaged",
            "is damaged: its token holds characters a link's token never has".to_string(),
        )
    } else if chars > want {
        (
            "Link too long",
            format!(
                "is too long: its token has {chars} characters, not {want} (a character copied after it, such as a full stop?)"
            ),
        )
    } else {
        (
            "Link incomplete",
            format!("is incomplete: its token has {chars} of its {want} characters"),
        )
    };
    Some(message(
        StatusCode::BAD_REQUEST,
        heading,
        &format!(
            "This set-password link {what}. Copy the whole link from where it was sent, or ask an admin for a new one (cloud user reset-password --email …)."
        ),
        "/sign-in",
        "Sign in",
    ))
}

/// `GET /set-password?token=…`: the form, while the link is valid.
pub async fn set_password_form(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<LinkQuery>,
) -> Response {
    let token = q.token.unwrap_or_default();
    if let Some(refused) = link_incomplete(&token) {
        return refused;
    }
    let user = match state
        .store
        .password_link_user(&crate::secrets::hash(&token))
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
    // A token cut short (a hand-made post, or a form whose link was cut) is said as on `GET`.
    if let Some(refused) = link_incomplete(&form.token) {
        return refused;
    }
    let token_hash = crate::secrets::hash(&form.token);
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
    let Ok(hash) = password::hash_off_thread(typed).await else {
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
            match session::start(&state.store, user_id, &hash).await {
                Ok(Some(id)) => signed_in(&id, state.secure, "/"),
                // Set again from another link meanwhile: that one's holder signs in.
                Ok(None) => link_gone(),
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

/// To sign-in, the browser told to drop the pages it keeps for Back (its back/forward cache
/// among them): a session that ended already leaves them behind too.
fn signed_out() -> Response {
    let mut response = Redirect::to("/sign-in").into_response();
    response.headers_mut().insert(
        HeaderName::from_static("clear-site-data"),
        HeaderValue::from_static("\"cache\""),
    );
    response
}

/// `POST /sign-out`: ends this session, or every session of the user with `everywhere`.
pub async fn sign_out(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Form(form): Form<SignOut>,
) -> Response {
    let (s, id_hash) = match session::current(&state.store, &headers).await {
        Ok(Some(found)) => found,
        Ok(None) => return signed_out(),
        Err(_) => return unavailable(),
    };
    if !crate::secrets::same(&s.csrf, &form.csrf) {
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
    let mut response = signed_out();
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
