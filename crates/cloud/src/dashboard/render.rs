//! What every page shares: rendering a template with its status, the message pages (storage
//! unavailable, form expired), the address shown in commands, and times as pages show them.

use askama::Template;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::DashboardState;

#[derive(Template)]
#[template(path = "dashboard/message.html")]
struct MessagePage<'a> {
    heading: &'a str,
    text: &'a str,
    link: &'a str,
    link_text: &'a str,
}

/// A rendered page with its status.
pub fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(cause = %e, "cannot render a dashboard page");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot render the page").into_response()
        }
    }
}

/// A page that says what happened and where to go.
pub fn message(
    status: StatusCode,
    heading: &str,
    text: &str,
    link: &str,
    link_text: &str,
) -> Response {
    page(
        status,
        &MessagePage {
            heading,
            text,
            link,
            link_text,
        },
    )
}

/// 503: storage failed.
pub fn unavailable() -> Response {
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Storage unavailable",
        "The service cannot reach its database right now. Try again in a moment.",
        "/",
        "Try again",
    )
}

/// 403: the form's CSRF token is missing or wrong.
pub fn csrf_refused() -> Response {
    message(
        StatusCode::FORBIDDEN,
        "Form expired",
        "This form was not sent from a page of this dashboard, or it is too old (CSRF check). Reload the page and send it again.",
        "/",
        "Back to the dashboard",
    )
}

/// The address for the commands the pages show: `--public-url` when set, else the one the
/// page was reached at (`https://HOST` over TLS, else `http://HOST`: the request's authority,
/// which HTTP/2 browsers send in place of `Host`, or its `Host`), and `CLOUD_HOST` when the
/// request named no usable host.
pub fn origin(state: &DashboardState, headers: &HeaderMap, uri: &Uri, tls: bool) -> String {
    if let Some(url) = &state.public_url {
        return url.clone();
    }
    let host = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()))
        .filter(|h| {
            h.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .unwrap_or("CLOUD_HOST");
    format!("{}://{host}", if tls { "https" } else { "http" })
}

/// The address the bridge commands a page shows dial: `--public-url` when it is `https://`;
/// else `https://` with the host the page was reached at (or `--public-url`'s) and the TLS
/// listener's port, since bridges speak TLS only, whichever listener served the page.
pub fn bridge_origin(state: &DashboardState, headers: &HeaderMap, uri: &Uri) -> String {
    if let Some(url) = state
        .public_url
        .as_ref()
        .filter(|u| u.starts_with("https://"))
    {
        return url.clone();
    }
    let from_public = state
        .public_url
        .as_deref()
        .and_then(|u| u.strip_prefix("http://"));
    let seen = origin(state, headers, uri, true);
    let authority = from_public.unwrap_or_else(|| seen.trim_start_matches("https://"));
    let host = authority
        .split('/')
        .next()
        .and_then(|a| a.parse::<axum::http::uri::Authority>().ok())
        .map_or_else(|| "CLOUD_HOST".to_string(), |a| a.host().to_string());
    match state.tls_port {
        443 => format!("https://{host}"),
        port => format!("https://{host}:{port}"),
    }
}

/// The cloud's own CA file, when a client reaching `base` must trust it: the CA signs the
/// cloud's certificate (unless an operator's is served) for its own names. Reached by another
/// name, or through an `https://` `--public-url`, a front with its own certificate answers.
pub fn own_ca_file<'a>(state: &'a DashboardState, base: &str) -> Option<&'a str> {
    let host = url::Url::parse(base)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))?;
    state
        .own_ca
        .as_ref()
        .filter(|ca| {
            // An `https://` public URL is a front with a certificate of its own.
            let front = state
                .public_url
                .as_deref()
                .is_some_and(|u| u.starts_with("https://"));
            base.starts_with("https://") && !front && ca.names.contains(&host)
        })
        .map(|ca| ca.file.as_str())
}

/// `text` as one word of a POSIX shell: single-quoted, its own single quotes escaped.
pub fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A stored time (µs) as pages show it: `2026-11-26 14:03:12 UTC`.
pub fn when_micros(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// An RFC 3339 time from an API answer (an event's `timestamp`, a commit's `time`, in any
/// offset) as pages show times, so that one page does not mix two forms; as given when it is
/// not one.
pub fn when_text(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.to_utc().format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| rfc3339.to_string())
}
