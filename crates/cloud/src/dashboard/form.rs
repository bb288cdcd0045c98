//! The dashboard's forms as its handlers read them: a form that does not read as the page's
//! (a field missing, not sent as a browser sends a form) is refused with a page that says so,
//! like every other dashboard error, not with the framework's plain text.

use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::render::message;

/// A form body (`application/x-www-form-urlencoded`) read into `T`.
pub struct Form<T>(pub T);

impl<T, S> FromRequest<S> for Form<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        match axum::Form::<T>::from_request(req, state).await {
            Ok(axum::Form(form)) => Ok(Form(form)),
            Err(rejection) => Err(refusal(&rejection)),
        }
    }
}

/// The page for a form that cannot be read: 415 for a body that is no form, else 400 naming
/// the missing or unreadable field.
fn refusal(rejection: &FormRejection) -> Response {
    let text = rejection.body_text();
    let (status, what) = match rejection {
        FormRejection::InvalidFormContentType(_) => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "The request was not sent as a form (Content-Type: application/x-www-form-urlencoded), as the dashboard's pages send it.".to_string(),
        ),
        _ => {
            let cause = text
                .strip_prefix("Failed to deserialize form body: ")
                .unwrap_or(&text);
            (
                StatusCode::BAD_REQUEST,
                format!("The form could not be read ({cause}): it was not sent by this page as it is now."),
            )
        }
    };
    message(
        status,
        "Form not readable",
        &format!("{what} Reload the page and send it again."),
        "/",
        "Back to the dashboard",
    )
}
