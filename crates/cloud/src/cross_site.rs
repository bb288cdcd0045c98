//! Requests that a page of another site makes a visitor's browser send. A browser attaches
//! this service's credentials on its own: the dashboard's session cookie, and an API key once
//! someone typed it into the `Basic` prompt that a 401 answers with (git and registry clients
//! need that challenge). A page elsewhere could then post events in the visitor's name, or
//! send a request through a bridge to an internal system. Browsers say where each request
//! comes from (Fetch Metadata: `Sec-Fetch-Site`, `Sec-Fetch-Mode`, `Sec-Fetch-Dest`); this
//! module refuses what another site's page may not do. Clients that are no browser (curl, git,
//! skopeo, bridges, CI jobs) send none of these headers and are never refused here.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::problem::Problem;

/// The browser's word for where a request comes from, when it is another site or a page with
/// an origin of its own (a sandboxed one); `None` for the service's own pages, for what the
/// user typed or bookmarked, and for clients that are no browser.
fn foreign(headers: &HeaderMap) -> Option<&str> {
    let site = headers
        .get("sec-fetch-site")?
        .to_str()
        .unwrap_or("unreadable");
    (site != "same-origin" && site != "none").then_some(site)
}

/// For browsers that send no Fetch Metadata (older ones): the `Origin` of a request that is
/// not a `GET` or `HEAD`, when it is not this service's own (`null` included): its host and
/// port against the authority the request was sent to (HTTP/2's `:authority`, else `Host`),
/// without regard to case, a port left out being the scheme's default.
fn foreign_origin(request: &Request) -> Option<&str> {
    let headers = request.headers();
    if headers.contains_key("sec-fetch-site")
        || matches!(*request.method(), Method::GET | Method::HEAD)
    {
        return None;
    }
    let origin = headers.get(header::ORIGIN)?.to_str().unwrap_or("null");
    let own = request
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|v| v.to_str().ok()));
    let same = match (origin.parse::<axum::http::Uri>(), own) {
        (Ok(from), Some(own)) => own.parse::<axum::http::uri::Authority>().is_ok_and(|own| {
            let default = if from.scheme_str() == Some("https") {
                443
            } else {
                80
            };
            from.host()
                .is_some_and(|h| h.eq_ignore_ascii_case(own.host()))
                && from.port_u16().unwrap_or(default) == own.port_u16().unwrap_or(default)
        }),
        _ => false,
    };
    (!same).then_some(origin)
}

/// Every route (crate::edge): a page of another site may link here (a top-level `GET`
/// navigation, as a link or a bookmark makes); anything else it asks for (a form post, a
/// `fetch`, an image, a frame) is refused with this 403, so that it can neither act with the
/// visitor's credentials nor read or embed what they see. `None` lets the request through.
pub fn refusal(request: &Request) -> Option<Response> {
    let headers = request.headers();
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let refused = match (foreign_origin(request), foreign(headers)) {
        (Some(origin), _) => Some(format!("{origin}, as the browser says in Origin")),
        (None, Some(site)) => {
            let navigation = header("sec-fetch-mode") == Some("navigate")
                && header("sec-fetch-dest").is_none_or(|d| d == "document")
                && matches!(*request.method(), Method::GET | Method::HEAD);
            (!navigation).then(|| format!("{site}, as the browser says in Sec-Fetch-Site"))
        }
        (None, None) => None,
    };
    let who = refused?;
    let problem = Problem::forbidden(format!(
        "a page of another origin ({who}) asked for {} {}; this service acts only for its own pages and for clients such as curl, git and skopeo",
        request.method(),
        request.uri().path()
    ));
    Some(
        as_registry_error(request.uri().path(), problem)
            .unwrap_or_else(|problem| problem.into_response()),
    )
}

/// Under `/v2`, where registry clients read OCI error bodies, the refusal as one.
fn as_registry_error(path: &str, problem: Problem) -> Result<Response, Problem> {
    if path != "/v2" && !path.starts_with("/v2/") {
        return Err(problem);
    }
    let body = tunnel::oci::error_body(problem.status, &problem.detail);
    Ok((
        StatusCode::FORBIDDEN,
        [
            (header::CONTENT_TYPE, "application/json"),
            (
                HeaderName::from_static(tunnel::oci::API_VERSION_HEADER),
                tunnel::oci::API_VERSION,
            ),
        ],
        body,
    )
        .into_response())
}

/// What a page may load a forwarded answer as: data for its script (`fetch`), or the page
/// itself when the user opens it. Anything else (a script, a worker, a style sheet, a frame,
/// an image…) is refused: a script or worker would run on this origin, and the others have no
/// use here.
const FORWARDED_DESTINATIONS: &[&str] = &["empty", "document"];

/// Forwarded routes, stricter: an internal system's answer goes to clients, to a user who
/// opened it themselves, and to this service's own pages, never to another site's page (not
/// even by a link: an internal system may act on a `GET`), and no page loads it as anything
/// but data or a page ([`FORWARDED_DESTINATIONS`]).
pub fn forwarding_refusal(headers: &HeaderMap) -> Option<Problem> {
    if let Some(site) = foreign(headers) {
        return Some(Problem::forbidden(format!(
            "a page of another origin ({site}, as the browser says in Sec-Fetch-Site) asked for an internal system's answer; open the address yourself, or use a client such as curl"
        )));
    }
    let dest = headers.get("sec-fetch-dest")?.to_str().unwrap_or_default();
    (!FORWARDED_DESTINATIONS.contains(&dest)).then(|| {
        Problem::forbidden(format!(
            "a page asked to load an internal system's answer as {dest:?} (Sec-Fetch-Dest); answers forwarded through a bridge go to clients, to pages' scripts as data, and to a user who opens them, never into a page as a script, style or frame"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn clients_and_own_pages_pass_other_sites_and_scripts_do_not() {
        assert!(forwarding_refusal(&headers(&[])).is_none());
        assert!(forwarding_refusal(&headers(&[("sec-fetch-site", "none")])).is_none());
        let own = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-dest", "empty"),
        ]);
        assert!(forwarding_refusal(&own).is_none());
        let link = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-dest", "document"),
        ]);
        let refused = forwarding_refusal(&link).expect("a link from another site");
        assert!(
            refused.detail.contains("another origin (cross-site"),
            "{}",
            refused.detail
        );
        let script = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-dest", "script"),
        ]);
        let refused = forwarding_refusal(&script).expect("loaded as a script");
        assert!(
            refused.detail.contains("as \"script\""),
            "{}",
            refused.detail
        );
        let worklet = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-dest", "sharedstorageworklet"),
        ]);
        assert!(forwarding_refusal(&worklet).is_some());
    }
}
