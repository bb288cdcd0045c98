//! The org's audit page, for admins: who created, revoked or changed what, when and from
//! which address, newest first and paged. The same entries are JSON lines in the log.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::DashboardState;
use super::extract::Query;
use super::me::{Me, admins_only};
use super::render::{message, page, unavailable, when_micros};

/// Entries per page.
const PAGE: i64 = 100;

struct Row {
    time: String,
    actor: String,
    address: String,
    action: String,
    target: String,
}

#[derive(Template)]
#[template(path = "dashboard/audit.html")]
struct AuditPage<'a> {
    me: &'a Me,
    entries: Vec<Row>,
    next: Option<i64>,
}

/// `?before=` (an entry id) from the previous page's link; text, so that an edited one is said
/// in this page's words, not the query parser's.
#[derive(Deserialize)]
pub struct Position {
    #[serde(default)]
    before: String,
}

/// `GET /audit`: admins only (a member gets 403).
pub async fn list(
    State(state): State<DashboardState>,
    me: Me,
    Query(at): Query<Position>,
) -> Response {
    if !me.admin {
        return admins_only(&me, "The audit is for the admins of your org.");
    }
    let before = match at.before.trim() {
        "" => None,
        id => match id.parse::<i64>() {
            Ok(id) => Some(id),
            Err(_) => {
                return message(
                    StatusCode::BAD_REQUEST,
                    "Address not valid",
                    "before comes from an \"Older entries\" link, an entry's number: this link was edited or cut. Start again from the first page.",
                    "/audit",
                    "Back to the audit",
                );
            }
        },
    };
    let Ok(mut found) = state
        .store
        .audit_entries(me.session.user.org_id, before, PAGE + 1)
        .await
    else {
        return unavailable();
    };
    let more = found.len() as i64 > PAGE;
    found.truncate(PAGE as usize);
    let next = found.last().map(|(id, _)| *id).filter(|_| more);
    let entries = found
        .into_iter()
        .map(|(_, e)| Row {
            time: when_micros(e.at),
            actor: e.actor,
            address: e.address,
            action: e.action,
            target: e.target,
        })
        .collect();
    page(
        StatusCode::OK,
        &AuditPage {
            me: &me,
            entries,
            next,
        },
    )
}
