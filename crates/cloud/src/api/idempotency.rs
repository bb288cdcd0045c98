//! `Idempotency-Key`: a repeat of a request with the same key and the same body gets the first
//! answer again (`Idempotent-Replayed: true`) and stores nothing; the same key with another
//! body is a 422, as Stripe and the IETF idempotency-key draft answer it, never a silent
//! replay of an answer to a different request.
//!
//! The stored answer carries the SHA-256 of the body it answered: `sha256=HEX\n{answer}`.
//! Answers stored before the digest was kept are plain JSON; they replay without a comparison.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::problem::Problem;

/// Longest accepted `Idempotency-Key`.
const MAX_KEY: usize = 255;

/// The request's `Idempotency-Key`, when it sends one; a 422 when it is empty, too long, not
/// ASCII, or sent twice (which of two keys would be meant cannot be known).
pub fn key(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Problem::idempotency_key(
            "the Idempotency-Key header was sent more than once; send it once",
        ));
    }
    let key = value.to_str().unwrap_or("").trim();
    let printable = key.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    if key.is_empty() || key.len() > MAX_KEY || !printable {
        return Err(Problem::idempotency_key(format!(
            "the Idempotency-Key header must be 1 to {MAX_KEY} printable ASCII characters (spaces inside it count)"
        )));
    }
    Ok(Some(key.to_string()))
}

/// The SHA-256 of a request body, in hex.
pub fn digest(body: &[u8]) -> String {
    crate::secrets::hex(&Sha256::digest(body))
}

/// What is stored for a key: the answer and the digest of the body it answered.
pub fn encode(body_digest: &str, answer: &str) -> String {
    format!("sha256={body_digest}\n{answer}")
}

/// The stored answer's digest (none for answers stored before digests were kept) and JSON.
fn decode(stored: &str) -> (Option<&str>, &str) {
    match stored
        .strip_prefix("sha256=")
        .and_then(|rest| rest.split_once('\n'))
    {
        Some((digest, answer)) => (Some(digest), answer),
        None => (None, stored),
    }
}

/// The answer to a repeat of `key` whose first answer is `stored`: the first answer again when
/// the body is the same, else a 422 that says why.
pub fn repeat(key: &str, stored: &str, body_digest: &str) -> Result<Response, Problem> {
    let (first_digest, answer) = decode(stored);
    if first_digest.is_some_and(|d| d != body_digest) {
        return Err(Problem::idempotency_key(format!(
            "the Idempotency-Key {key:?} was already used for a request with a different body; a retry must send the same body, and a new request needs a new key"
        )));
    }
    let mut response = (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_body_replays_another_is_refused_old_rows_replay() {
        let d = digest(b"{}");
        let stored = encode(&d, r#"{"id":"a"}"#);
        let replayed = repeat("k", &stored, &d).unwrap();
        assert_eq!(replayed.headers()["idempotent-replayed"], "true");
        let err = repeat("k", &stored, &digest(b"[]")).unwrap_err();
        assert!(err.detail.contains("different body"));
        assert!(repeat("k", r#"{"id":"a"}"#, &d).is_ok());
    }

    #[test]
    fn keys_are_printable_ascii_spaces_inside_included() {
        let key_of = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("idempotency-key", value.parse().unwrap());
            key(&headers)
        };
        assert_eq!(key_of(" run 42 ").unwrap().as_deref(), Some("run 42"));
        for bad in ["a\tb", "", &"k".repeat(MAX_KEY + 1)] {
            let err = key_of(bad).unwrap_err();
            assert!(err.detail.contains("printable ASCII"), "{bad:?}");
        }
    }
}
