//! What the correlation routes that change something share: their JSON body, read with a
//! problem that says what was expected, and the audit record of a change made with an API key.

use axum::extract::rejection::JsonRejection;
use axum::{Extension, Json};

use super::CorrelationState;
use crate::auth::{PeerAddr, Principal};
use crate::problem::{Problem, storage_unavailable};
use crate::signals::event::FieldError;
use crate::storage::Actor;

/// A route's JSON body, or its problem: 415 when it is not sent as `application/json`, else
/// 400 saying what is wrong and showing the `expected` shape.
pub(super) fn json_body<T>(
    body: Result<Json<T>, JsonRejection>,
    expected: &str,
) -> Result<T, Problem> {
    match body {
        Ok(Json(value)) => Ok(value),
        Err(JsonRejection::MissingJsonContentType(_)) => Err(Problem::unsupported_media(format!(
            "send the body as Content-Type: application/json, such as {expected}"
        ))),
        Err(e) => {
            // axum's text leads with its own sentence ("Failed to parse the request body as
            // JSON: …"); what serde found is after it, said as the ingest routes say it.
            let text = e.body_text();
            let found = text
                .split_once(": ")
                .map_or(text.as_str(), |(_, found)| found);
            let what = match e {
                JsonRejection::JsonSyntaxError(_) => "the body is not valid JSON",
                JsonRejection::JsonDataError(_) => "the body is not of the expected shape",
                _ => "the body cannot be read",
            };
            Err(Problem::bad_request(format!(
                "{what}: {found}; send {expected}"
            )))
        }
    }
}

/// A value as an error quotes it: whole when short, else its first 64 characters and its
/// length (a megabyte sent is not echoed back).
pub(super) fn shown(value: &str) -> String {
    match value.char_indices().nth(64) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
        None => format!("{value:?}"),
    }
}

/// The one problem of a body that is not a JSON object (an array, a string, …), whose fields
/// would otherwise each be reported missing; `shape` is what was expected.
pub(super) fn not_an_object(body: &serde_json::Value, shape: &str) -> Option<FieldError> {
    (!body.is_object()).then(|| FieldError {
        pointer: String::new(),
        detail: format!(
            "the body must be a JSON object, not {}: {shape}",
            kind_of(body)
        ),
    })
}

/// "a string", "a number", …: what a JSON value is, for messages.
pub(super) fn kind_of(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One problem for each member of the object `body` that is not one of `known` (the body's
/// shape is `shape`, for the message).
pub(super) fn unknown_fields(
    body: &serde_json::Value,
    known: &[&str],
    shape: &str,
) -> Vec<FieldError> {
    body.as_object()
        .into_iter()
        .flat_map(|obj| obj.keys())
        .filter(|key| !known.contains(&key.as_str()))
        .map(|key| FieldError {
            pointer: format!("/{}", crate::inputs::pointer_token(key)),
            detail: format!("unknown field {key:?}; the body is {shape}"),
        })
        .collect()
}

/// Records a change made with an API key: the key's public id and the caller's address.
pub(super) async fn audit(
    state: &CorrelationState,
    principal: &Principal,
    peer: Option<Extension<PeerAddr>>,
    action: &str,
    object: &str,
) -> Result<(), Problem> {
    state
        .store
        .audit(principal.org_id, &actor(principal, peer), action, object)
        .await
        .map_err(|e| storage_unavailable(&e))
}

/// Who acts through the API, for the audit: the API key's public id, from the peer's address.
pub(super) fn actor(principal: &Principal, peer: Option<Extension<PeerAddr>>) -> Actor {
    Actor {
        who: principal.key_id.clone(),
        address: peer.map_or_else(|| "unknown".into(), |Extension(p)| p.0.ip().to_string()),
    }
}
