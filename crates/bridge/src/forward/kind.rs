//! What one kind of resource adds to the shared forwarding phases, in the manner of pingora's
//! `ProxyHttp`: where requests go ([`Kind::base_url`]), which requests the entry admits
//! ([`Kind::admit`]), the credentials it injects ([`Kind::upstream_request_filter`]) and how
//! a refusal reads to the kind's clients ([`Kind::refusal`]). Everything else (path hygiene,
//! memory and connection limits, streaming, audit, metrics) is the pipeline's, the same for
//! every kind.

use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use url::Url;

use super::ResBody;

/// Why a request is refused: its status, the metric reason, the audit rule and the message
/// the caller reads.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// HTTP status of the refusal.
    pub status: StatusCode,
    /// `reason` label of `bridge_refused_total`.
    pub reason: &'static str,
    /// The rule that decided, for the audit record.
    pub rule: String,
    /// What the caller reads: what was refused and what to do.
    pub why: String,
}

impl Refusal {
    /// A 403 by an allow rule or a kind's own rule.
    pub fn forbidden(rule: impl Into<String>, why: impl Into<String>) -> Self {
        Refusal {
            status: StatusCode::FORBIDDEN,
            reason: "not_allowed",
            rule: rule.into(),
            why: why.into(),
        }
    }

    /// A 404: nothing of that name behind this entry.
    pub fn not_found(rule: impl Into<String>, why: impl Into<String>) -> Self {
        Refusal {
            status: StatusCode::NOT_FOUND,
            reason: "not_declared",
            rule: rule.into(),
            why: why.into(),
        }
    }
}

/// What [`Kind::authorize`] returns: the header value, or why the request cannot be sent.
pub type Authorize<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Option<HeaderValue>, Refusal>> + Send + 'a>,
>;

/// The head of a request sent to the internal system, as [`Kind::follow`] sees it.
pub struct Sent {
    /// Its method.
    pub method: Method,
    /// Its URI and headers, when the kind keeps them ([`Kind::keeps_request`]).
    pub head: Option<(http::Uri, HeaderMap)>,
}

/// What [`Kind::follow`] returns: the answer to pass on, or why none is.
pub type Follow<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<http::Response<hyper::body::Incoming>, Refusal>>
            + Send
            + 'a,
    >,
>;

/// One kind of resource, implemented once per kind (`api.rs`, `git.rs`).
pub trait Kind: Send + Sync {
    /// The entry's `max_connections`, when it sets one.
    fn max_connections(&self) -> Option<u32>;

    /// The base URL the request's path is appended to (the upstream peer).
    fn base_url(&self) -> &Url;

    /// The CA bundle trusted for this entry's HTTPS instead of the system roots.
    fn tls_ca_file(&self) -> Option<&std::path::Path> {
        None
    }

    /// The request's query as the internal system knows what it names, before anything
    /// checks it (a registry's blob mount from a repository that the client names through
    /// another entry on the same registry); `query` itself by default.
    fn local_query<'q>(&self, query: &'q str) -> std::borrow::Cow<'q, str> {
        query.into()
    }

    /// The rule that admits `method` on `path` (normalised, relative to the entry) with
    /// `query`, or why not.
    fn admit(&self, method: &Method, path: &str, query: Option<&str>) -> Result<String, Refusal>;

    /// Why the request's headers make it one the kind refuses (a registry never takes a form
    /// body, which its server would read parameters from); none by default.
    fn admit_headers(&self, _method: &Method, _headers: &HeaderMap) -> Result<(), Refusal> {
        Ok(())
    }

    /// Adds the entry's credentials (and any header the kind needs) to the upstream request.
    fn upstream_request_filter(&self, headers: &mut HeaderMap);

    /// The header value of the credentials [`Kind::upstream_request_filter`] adds to every
    /// request, when they are the same for all: an answer's headers that echo them are
    /// removed ([`super::echo`]). None by default.
    fn injected(&self) -> Option<String> {
        None
    }

    /// An `Authorization` the kind must first obtain for `method` on `path` with `query` (a
    /// registry's token), set after [`Kind::upstream_request_filter`]; none by default.
    fn authorize<'a>(
        &'a self,
        _method: &'a Method,
        _path: &'a str,
        _query: Option<&'a str>,
    ) -> Authorize<'a> {
        Box::pin(async { Ok(None) })
    }

    /// Whether [`Kind::follow`] needs the request it answers (a copy of its head is kept).
    fn keeps_request(&self) -> bool {
        false
    }

    /// The answer to pass on for `response` to `sent` (the request's head when
    /// [`Kind::keeps_request`], else only its method): a kind may follow a redirect itself (a
    /// registry's blob storage) rather than hand an internal URL to the caller, or send the
    /// request again with fresh credentials. The response itself by default.
    fn follow<'a>(
        &'a self,
        _sent: &'a Sent,
        response: http::Response<hyper::body::Incoming>,
    ) -> Follow<'a> {
        Box::pin(async move { Ok(response) })
    }

    /// Looks at the internal system's answer before it goes back, and may rewrite its headers:
    /// `Some(refusal)` replaces it (the body is dropped unread). Passes everything by default.
    fn response_filter(&self, _status: StatusCode, _headers: &mut HeaderMap) -> Option<Refusal> {
        None
    }

    /// A refusal as the kind's clients show it: RFC 9457 problem+json by default, as the
    /// cloud's own errors are.
    fn refusal(&self, status: StatusCode, why: &str) -> Response<ResBody> {
        problem(status, why)
    }
}

/// An `application/problem+json` refusal (`type` `urn:signals:problem:bridge-…`), with
/// `Retry-After: 1` on a 503.
pub fn problem(status: StatusCode, detail: &str) -> Response<ResBody> {
    let slug = match status.as_u16() {
        400 => "bridge-malformed",
        403 => "bridge-forbidden",
        404 => "bridge-not-found",
        405 => "bridge-method-not-allowed",
        502 => "bridge-bad-gateway",
        503 => "bridge-unavailable",
        _ => "bridge-refused",
    };
    let body = serde_json::json!({
        "type": format!("urn:signals:problem:{slug}"),
        "title": status.canonical_reason().unwrap_or("Refused"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut r = text(status, "");
    *r.body_mut() = full(body.to_string());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

/// A whole body of `text`.
pub fn full(text: String) -> ResBody {
    http_body_util::Full::new(bytes::Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

/// A `text/plain` answer (with `Retry-After: 1` on a 503: busy or above `max_memory_mb`, both
/// pass within moments).
pub fn text(status: StatusCode, body: &str) -> Response<ResBody> {
    let mut r = Response::new(
        http_body_util::Full::new(bytes::Bytes::from(format!("{body}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}
