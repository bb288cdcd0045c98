//! The dashboard's addresses as its handlers read them: a query string or path segment that
//! does not read as the page's (an edited or truncated link) is refused with a page that
//! says so, like every other dashboard error, not with the framework's plain text.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::render::message;

/// A page's query string read into `T`.
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(query)) => Ok(Query(query)),
            Err(rejection) => Err(refusal(
                &rejection.body_text(),
                "Failed to deserialize query string: ",
            )),
        }
    }
}

/// A page's path segments read into `T`.
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(path)) => Ok(Path(path)),
            Err(rejection) => Err(refusal(&rejection.body_text(), "Invalid URL: ")),
        }
    }
}

/// The 400 page for an address that cannot be read, naming what in it could not be.
fn refusal(text: &str, prefix: &str) -> Response {
    let cause = text.strip_prefix(prefix).unwrap_or(text);
    message(
        StatusCode::BAD_REQUEST,
        "Address not readable",
        &format!(
            "This page's address could not be read ({cause}): it was edited or cut short. Follow the dashboard's own links."
        ),
        "/",
        "Back to the dashboard",
    )
}
