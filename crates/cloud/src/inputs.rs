//! What every route that stores or looks up names refuses before its handler runs, so that
//! both databases answer alike: a NUL character (PostgreSQL's text cannot hold one; SQLite
//! would store it) in the path, a query parameter or a body, and a compressed body (no route
//! here decodes one). A byte-order mark before a JSON body is dropped, as `POST /v1/signals`
//! drops it. The forwarding routes check their path only ([`nul_in_path`]): the query and the
//! body are the caller's business with the resource (Git sends gzip bodies).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::problem::Problem;
use crate::signals::event::FieldError;

/// The NUL character's problem, said the same way wherever it is found.
const NUL: &str = "holds the NUL character (%00, \\u0000), which is stored nowhere; remove it";

/// Marks an answer that [`refuse_in_head`] gave, so that a feature's own middleware can count
/// it as that feature's refusal (the API counts refused signals).
#[derive(Debug, Clone, Copy)]
pub struct RefusedInHead;

/// Refuses a NUL in the path or the query, and a `Content-Encoding`, for routes whose
/// handlers read the body themselves (the body is read and dropped first: crate::refused_body).
pub async fn refuse_in_head(request: Request, next: Next) -> Response {
    refuse_head(request, next, true).await
}

/// [`refuse_in_head`] without the query, for `POST /v1/signals/{signal_key}`: webhook senders
/// append parameters of their own, in whatever encoding, and an event must not be lost to them.
pub async fn refuse_in_head_but_query(request: Request, next: Next) -> Response {
    refuse_head(request, next, false).await
}

/// Answers a head's problem (the query's too, when `query`), or runs the handler.
async fn refuse_head(request: Request, next: Next, check_query: bool) -> Response {
    match head_problem(&request, check_query) {
        Some(problem) => {
            let (parts, body) = request.into_parts();
            crate::refused_body::drain_unread(&parts.headers, body).await;
            let mut response = problem.into_response();
            response.extensions_mut().insert(RefusedInHead);
            response
        }
        None => next.run(request).await,
    }
}

/// The problem of a NUL in a raw (percent-encoded) path, for the forwarding routes, which
/// check the path only: no bridge, resource or repository name holds one, and the query and
/// body are the caller's business with the resource.
pub fn nul_in_path(raw_path: &str) -> Option<Problem> {
    // A URI cannot carry a raw NUL: only its escape.
    raw_path
        .contains("%00")
        .then(|| Problem::bad_request(format!("the path {NUL}")))
}

/// How a feature answers a refusal: problem+json for the API, a page for the dashboard.
pub type Answer = fn(Problem) -> Response;

/// [`refuse_in_head`], and a NUL in a form or a JSON body, for routes whose body was read
/// whole first (`stall::whole_body`), answered by `answer`; drops a byte-order mark before a
/// JSON body.
pub async fn refuse_in_whole(
    State(answer): State<Answer>,
    request: Request,
    next: Next,
) -> Response {
    match checked_whole(request).await {
        Ok(request) => next.run(request).await,
        Err(problem) => answer(problem),
    }
}

/// The request with its body checked (and a JSON body's byte-order mark dropped), or why not.
async fn checked_whole(request: Request) -> Result<Request, Problem> {
    if let Some(problem) = head_problem(&request, true) {
        return Err(problem);
    }
    let (parts, body) = request.into_parts();
    // Already in memory: `whole_body` read it.
    let Ok(mut bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Err(Problem::bad_request("cannot read the request body"));
    };
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("application/x-www-form-urlencoded") {
        if let Some(field) = form_field_with_nul(&bytes) {
            return Err(Problem::bad_request(format!("form field {field:?} {NUL}")));
        }
    } else if content_type.contains("json") {
        if let Some(rest) = bytes.strip_prefix("\u{feff}".as_bytes()) {
            bytes = Bytes::copy_from_slice(rest);
        }
        if let Some((pointer, name)) = json_pointer_to_nul(&bytes) {
            let what = if name {
                "the member's name"
            } else {
                "the string"
            };
            return Err(Problem::invalid(vec![FieldError {
                pointer,
                detail: format!("{what} {NUL}"),
            }]));
        }
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The problem of a request head: NUL in the path or (when `query`) a query parameter, or a
/// body encoding.
fn head_problem(request: &Request, check_query: bool) -> Option<Problem> {
    let uri = request.uri();
    if let Some(problem) = nul_in_path(uri.path()) {
        return Some(problem);
    }
    let query = uri.query().filter(|_| check_query);
    if let Some(query) = query
        && let Some(name) = form_field_with_nul(query.as_bytes())
    {
        return Some(Problem::bad_request(format!(
            "query parameter {name:?} {NUL}"
        )));
    }
    if let Some(query) = query
        && let Some(name) = field_not_utf8(query.as_bytes())
    {
        return Some(Problem::bad_request(format!(
            "query parameter {name:?} is not UTF-8 text once percent-decoded (a byte such as %FF alone); send its text as UTF-8, percent-encoded"
        )));
    }
    if tunnel::hop::repeated(request.headers(), CONTENT_TYPE) {
        return Some(Problem::unsupported_media(
            "send one Content-Type header (this request has two or more, which a proxy in front could read differently)",
        ));
    }
    // HTTP/1.1 reads `chunked` alone; any other transfer coding (`gzip, chunked`) would reach
    // the handler still encoded.
    if let Some(coding) = tunnel::hop::coded_transfer(request.headers()) {
        return Some(Problem::unsupported_media(format!(
            "Transfer-Encoding: {coding} is not accepted here; send the body uncompressed (chunked, or with a Content-Length)"
        )));
    }
    let encoding = request
        .headers()
        .get(CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .filter(|e| !e.is_empty() && e != "identity");
    encoding.map(|e| {
        Problem::unsupported_media(format!(
            "Content-Encoding: {e} is not accepted here; send the body uncompressed, without the header"
        ))
    })
}

/// The name of the first `name=value` pair (URL-encoded) whose name or value holds a NUL.
fn form_field_with_nul(encoded: &[u8]) -> Option<String> {
    url::form_urlencoded::parse(encoded)
        .find(|(name, value)| name.contains('\0') || value.contains('\0'))
        .map(|(name, _)| name.replace('\0', "\\u0000"))
}

/// The name (shown lossily) of the first `name=value` pair whose name or value does not
/// percent-decode to UTF-8: read as it stands, it would become U+FFFD and match nothing.
fn field_not_utf8(encoded: &[u8]) -> Option<String> {
    encoded.split(|b| *b == b'&').find_map(|pair| {
        let mut halves = pair.splitn(2, |b| *b == b'=');
        let name = decoded(halves.next().unwrap_or_default());
        let value = decoded(halves.next().unwrap_or_default());
        (std::str::from_utf8(&name).is_err() || std::str::from_utf8(&value).is_err())
            .then(|| String::from_utf8_lossy(&name).into_owned())
    })
}

/// One part of a form pair, percent-decoded (`+` is a space), as bytes.
fn decoded(part: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        let escaped = (part[i] == b'%')
            .then(|| Some((hex(*part.get(i + 1)?)?, hex(*part.get(i + 2)?)?)))
            .flatten();
        match (escaped, part[i]) {
            (Some((hi, lo)), _) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Escapes a key for use in a JSON pointer, and writes a NUL in it as the six characters
/// `\u0000`, as JSON does: a message holding a NUL could not be stored or logged by its reader.
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0")
        .replace('/', "~1")
        .replace('\0', "\\u0000")
}

/// Where the first string or member name holding a NUL is in a JSON body (a JSON pointer,
/// and whether it is a member's name), if the body is JSON and holds one; the body is parsed
/// only when its text escapes one.
fn json_pointer_to_nul(body: &[u8]) -> Option<(String, bool)> {
    if !body.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000")) {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    find_nul(&value, String::new())
}

fn find_nul(value: &Value, at: String) -> Option<(String, bool)> {
    match value {
        Value::String(s) if s.contains('\0') => Some((at, false)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_nul(item, format!("{at}/{i}"))),
        Value::Object(members) => members.iter().find_map(|(key, item)| {
            let here = format!("{at}/{}", pointer_token(key));
            if key.contains('\0') {
                Some((here, true))
            } else {
                find_nul(item, here)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_found_where_it_is() {
        let at = |body: &str| json_pointer_to_nul(body.as_bytes());
        assert_eq!(
            at(r#"{"dependencies":["a","b\u0000"]}"#).unwrap(),
            ("/dependencies/1".to_string(), false)
        );
        assert_eq!(
            at(r#"{"a/b":{"c\u0000":1}}"#).unwrap(),
            ("/a~1b/c\\u0000".to_string(), true),
            "a name is said to be one"
        );
        assert_eq!(
            at(r#"{"a":"\\u0000"}"#),
            None,
            "an escaped backslash is no NUL"
        );
        assert_eq!(
            form_field_with_nul(b"email=a%00b&password=x").as_deref(),
            Some("email")
        );
        assert_eq!(form_field_with_nul(b"email=a&b=c"), None);
    }

    #[test]
    fn a_query_that_is_not_utf8_is_named() {
        assert_eq!(
            field_not_utf8(b"limit=5&service=%FF").as_deref(),
            Some("service")
        );
        assert_eq!(field_not_utf8(b"%C3=x").as_deref(), Some("\u{fffd}"));
        // Text, a literal replacement character, a stray % and + are all fine.
        assert_eq!(
            field_not_utf8(b"service=caf%C3%A9&e=%EF%BF%BD&p=100%&q=a+b"),
            None
        );
    }
}
