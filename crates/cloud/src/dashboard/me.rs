//! Who is signed in: the [`Me`] extractor every signed-in page takes (session, role, CSRF
//! token, the release notice), and the check of an admin's form.

use askama::Template;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use crate::auth::PeerAddr;

use super::DashboardState;
use super::render::{csrf_refused, page, unavailable};
use super::session;

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
    /// What the form that led here did ([`super::done::Done`]), said once above the page.
    pub done: Option<String>,
    /// The navigation entry this page belongs to (`/events` for `/events/…`), which the menu
    /// marks as the current page.
    pub section: String,
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
        let mut me = match me(state, &parts.headers).await {
            // A page asked for without a session comes back after sign-in; a form's address
            // leads back to its page, and sign-in says that the form was not saved.
            Err(answer) if answer.status() == StatusCode::SEE_OTHER => {
                use axum::http::Method;
                let unsaved = !matches!(parts.method, Method::GET | Method::HEAD);
                return Err(to_sign_in(&parts.uri, unsaved));
            }
            other => other?,
        };
        me.section = section(parts.uri.path());
        me.done = super::done::Done::said(parts.uri.path(), parts.uri.query(), &me.csrf);
        if let Some(peer) = parts.extensions.get::<PeerAddr>() {
            me.address = peer.0.ip().to_string();
        }
        if me.session.user.release_notices {
            me.notice = release_notice(state, me.session.user.org_id);
        }
        Ok(me)
    }
}

/// The sign-in page, to come back to `uri` after it: a page asked for without a session, or
/// (`unsaved`) a form sent without one, whose own address leads back to the form's page.
pub fn to_sign_in(uri: &axum::http::Uri, unsaved: bool) -> Response {
    let back = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if let Some(next) = local_path(back).filter(|next| *next != "/") {
        query.append_pair("next", next);
    }
    if unsaved {
        query.append_pair("unsaved", "1");
    }
    let query = query.finish();
    if query.is_empty() {
        Redirect::to("/sign-in").into_response()
    } else {
        Redirect::to(&format!("/sign-in?{query}")).into_response()
    }
}

/// `next` when it is a path of this site to go to after sign-in, never another site's
/// (`//host`, `/\host`, a scheme) nor the sign-in page itself; at most 2 KiB.
pub fn local_path(next: &str) -> Option<&str> {
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && next.len() <= 2048
        && !next.starts_with("/sign-in");
    local.then_some(next)
}

/// The navigation entry of `path`: its first segment, or its first two under `/integrations/`.
fn section(path: &str) -> String {
    let mut segments = path.trim_start_matches('/').split('/');
    match segments.next().unwrap_or_default() {
        "integrations" => format!("/integrations/{}", segments.next().unwrap_or_default()),
        first => format!("/{first}"),
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
        "Bridge release {} is available: {} connected {} an older release ({}). See Integrations: Bridge to upgrade.",
        state.release,
        behind.len(),
        if behind.len() == 1 {
            "instance runs"
        } else {
            "instances run"
        },
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
            done: None,
            section: String::new(),
        }),
        Ok(None) => Err(Redirect::to("/sign-in").into_response()),
        Err(_) => Err(unavailable()),
    }
}

#[derive(Template)]
#[template(path = "dashboard/admins_only.html")]
struct AdminsOnlyPage<'a> {
    me: &'a Me,
    text: &'a str,
}

/// 403 for a member, saying why in `text`: a signed-in page with the menu, so that the member
/// goes on from it.
pub fn admins_only(me: &Me, text: &str) -> Response {
    page(StatusCode::FORBIDDEN, &AdminsOnlyPage { me, text })
}

/// `None` for an admin with the form's right CSRF token; else the 403 page to answer.
pub fn refuse_admin_form(me: &Me, csrf: &str) -> Option<Response> {
    if !crate::secrets::same(&me.csrf, csrf) {
        return Some(csrf_refused());
    }
    if !me.admin {
        tracing::warn!(email = %me.email, org = %me.org, "refused: an admin action by a member");
        return Some(admins_only(
            me,
            "Your role is member: members read, admins manage. Ask an admin of your org.",
        ));
    }
    None
}
