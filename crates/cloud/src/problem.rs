//! RFC 9457 problem details: every error the API returns, with a stable `type` and, for
//! validation errors, one entry per bad field.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::signals::event::FieldError;

/// An API error, rendered as `application/problem+json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Stable identifier of the problem kind (`urn:signals:problem:…`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind.
    pub title: &'static str,
    /// HTTP status code.
    pub status: u16,
    /// What happened in this case and what to do.
    pub detail: String,
    /// Field-level errors (JSON pointers), for 422.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// Seconds to wait (429, 503); sent as `Retry-After` too.
    #[serde(skip)]
    pub retry_after: Option<u64>,
    /// Sends `WWW-Authenticate` (401).
    #[serde(skip)]
    pub challenge: bool,
}

/// The most field errors a 422 lists; its `detail` gives the whole count.
pub const MAX_FIELD_ERRORS: usize = 100;

impl Problem {
    fn new(status: StatusCode, slug: &str, title: &'static str, detail: impl Into<String>) -> Self {
        Problem {
            kind: format!("urn:signals:problem:{slug}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
            retry_after: None,
            challenge: false,
        }
    }

    /// 422 for the `Idempotency-Key` header (malformed, sent twice, or reused with another
    /// body): a problem of the request's header, so no `errors[]` pointing into the body.
    pub fn idempotency_key(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key",
            "Invalid Idempotency-Key",
            detail,
        )
    }

    /// 400: the body or a query parameter cannot be read.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed",
            "Malformed request",
            detail,
        )
    }

    /// 400: the caller's body broke off or was framed wrong: the caller's to fix, never a
    /// failure of the server or a tunnel to retry.
    pub fn body_unreadable(cause: &dyn std::fmt::Display) -> Self {
        Self::bad_request(format!(
            "could not read the request body ({cause}): its chunked framing is malformed, or the connection closed before its end; fix the client's framing and resend"
        ))
    }

    /// 426: a bridge speaking a tunnel protocol this cloud does not.
    pub fn upgrade_required(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UPGRADE_REQUIRED,
            "protocol-version",
            "Tunnel protocol not supported",
            detail,
        )
    }

    /// 401: no API key, or not a valid one.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        let mut p = Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        );
        p.challenge = true;
        p
    }

    /// 403: a valid key acting on another org's resource.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
    }

    /// 404: nothing of that name in this org.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            detail,
        )
    }

    /// 409: the request is sound but what it reads is not set up for it yet (the detail says
    /// what to set up).
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "not-set-up", "Not set up", detail)
    }

    /// 409: what the request reads (an event's fields) does not fit what it is read against
    /// (a deployment's sha and its repository): the data to fix, said in the detail.
    pub fn mismatch(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "mismatch",
            "Does not match the repository",
            detail,
        )
    }

    /// 502: a system behind a bridge failed to answer usefully.
    pub fn bad_gateway(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            "bad-gateway",
            "Bad gateway",
            detail,
        )
    }

    /// 500: the server found its own data unusable (never the client's fault).
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            detail,
        )
    }

    /// 504: the bridge's resource did not answer in time.
    pub fn gateway_timeout(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "gateway-timeout",
            "Gateway timeout",
            detail,
        )
    }

    /// 408: the client paused mid-request for longer than `--header-read-timeout`.
    pub fn request_timeout(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request-timeout",
            "Request timeout",
            detail,
        )
    }

    /// 408 for a request body that paused for `pause` (`--header-read-timeout`): the signal
    /// route and forwarded uploads say it the same way.
    pub fn body_stalled(pause: std::time::Duration) -> Self {
        Self::request_timeout(format!(
            "the request body stopped arriving for {} s (--header-read-timeout); send it whole without pausing",
            pause.as_secs()
        ))
    }

    /// 413: body or event too large.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            "Payload too large",
            detail,
        )
    }

    /// 415: not JSON.
    pub fn unsupported_media(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            detail,
        )
    }

    /// 422: fields are invalid; `errors` names each, up to [`MAX_FIELD_ERRORS`] (a batch of
    /// 500 events can hold over 100,000 bad values: their list would be many times the body).
    pub fn invalid(mut errors: Vec<FieldError>) -> Self {
        let detail = if errors.len() > MAX_FIELD_ERRORS {
            format!(
                "{} field(s) invalid; nothing was stored. errors lists the first {MAX_FIELD_ERRORS}; fix those, and the same mistakes elsewhere, and resend",
                errors.len()
            )
        } else {
            format!(
                "{} field(s) invalid; nothing was stored. Fix the fields listed in errors and resend",
                errors.len()
            )
        };
        errors.truncate(MAX_FIELD_ERRORS);
        let mut p = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-fields",
            "Invalid fields",
            detail,
        );
        p.errors = errors;
        p
    }

    /// 429: over the signal key's rate.
    pub fn rate_limited(retry_after: u64, detail: impl Into<String>) -> Self {
        let mut p = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too many requests",
            detail,
        );
        p.retry_after = Some(retry_after);
        p
    }

    /// 503: storage (or a bridge) unavailable for now.
    pub fn unavailable(retry_after: u64, detail: impl Into<String>) -> Self {
        let mut p = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            detail,
        );
        p.retry_after = Some(retry_after);
        p
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if self.challenge {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"signals\", Basic realm=\"signals\""),
            );
        }
        response
    }
}

/// Logs a storage failure and turns it into a 503 for the client.
pub fn storage_unavailable(err: &crate::storage::StorageError) -> Problem {
    tracing::error!(cause = %err, "storage unavailable");
    Problem::unavailable(
        2,
        "storage is unavailable right now; retry shortly (with an Idempotency-Key on posted events: one that broke during its commit may have been stored)",
    )
}

/// The `detail` of a problem+json body, or the body itself when it is not one (a peer's
/// refusal, read back to be shown in another protocol).
pub fn detail_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

/// A route's path parameters, as axum's `Path` reads them (percent-decoded), but refused as a
/// problem (400) like every other malformed request when one is not UTF-8 once decoded.
pub struct PathParams<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for PathParams<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Problem> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(params)) => Ok(PathParams(params)),
            // A 5xx rejection is a route of ours that names parameters it does not have.
            Err(rejection) if rejection.status().is_server_error() => {
                Err(Problem::internal(format!(
                    "cannot read the path {}: {}",
                    parts.uri.path(),
                    rejection.body_text()
                )))
            }
            Err(rejection) => Err(Problem::bad_request(format!(
                "cannot read the path {} ({}); percent-encode its segments as UTF-8",
                parts.uri.path(),
                rejection.body_text()
            ))),
        }
    }
}
