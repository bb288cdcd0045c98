//! The question an action that cannot be undone (revoking, removing) asks first: a page that
//! says what the action will do, with a button that sends the same form again, confirmed.

use askama::Template;
use axum::http::StatusCode;
use axum::response::Response;

use super::me::Me;
use super::render::page;

#[derive(Template)]
#[template(path = "dashboard/confirm.html")]
struct ConfirmPage<'a> {
    me: &'a Me,
    heading: &'a str,
    text: &'a str,
    action: &'a str,
    fields: &'a [(&'a str, &'a str)],
    button: &'a str,
    back: &'a str,
}

/// What an action that cannot be undone (revoking, removing) shows first: what it will do,
/// and a button that sends the same form again with `confirm=yes`, or a way back.
pub struct Confirm<'a> {
    /// The question, such as "Revoke bridge dc1?".
    pub heading: &'a str,
    /// What happens once it is confirmed.
    pub text: &'a str,
    /// The form's address and its fields (besides `csrf` and `confirm`).
    pub action: &'a str,
    pub fields: &'a [(&'a str, &'a str)],
    /// The button's words, and the page the Cancel link leads back to.
    pub button: &'a str,
    pub back: &'a str,
}

impl Confirm<'_> {
    /// The question's page, unless the form said `confirm=yes` (then `None`: go on).
    pub fn unless_confirmed(&self, me: &Me, confirm: &str) -> Option<Response> {
        (confirm != "yes").then(|| {
            page(
                StatusCode::OK,
                &ConfirmPage {
                    me,
                    heading: self.heading,
                    text: self.text,
                    action: self.action,
                    fields: self.fields,
                    button: self.button,
                    back: self.back,
                },
            )
        })
    }
}
