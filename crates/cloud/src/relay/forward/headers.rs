//! The heads that cross the relay: what of the caller's request the bridge never sees, and
//! what of an internal system's answer the caller never gets.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

/// Headers that belong to one hop, or to the caller's credentials, and are never forwarded
/// (but an answer's `Trailer`, which [`response_filter`] keeps).
const DROPPED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "proxy-authenticate",
    "cookie",
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    // `100-continue` is answered by this hop (hyper does when the body is read); passed on,
    // it would make the internal server send an interim answer nobody waits for.
    "expect",
];

/// The caller's headers as the bridge gets them: without [`DROPPED`], those the caller's
/// `Connection` lists, any `x-bridge-*` (the tunnel's own, which only this hop sets) and any
/// `x-request-id`, in every spelling a CGI, WSGI or Rack server joins (`X_Request_Id`): this
/// hop sets the one the audit record names.
pub(super) fn request_filter(from: &HeaderMap) -> HeaderMap {
    let listed = tunnel::hop::connection_listed(from);
    let mut headers = HeaderMap::with_capacity(from.len() + 3);
    for (k, v) in from {
        if !tunnel::hop::is_named(k, DROPPED)
            && !tunnel::hop::is_named(k, &["x-bridge-*", tunnel::HEADER_REQUEST_ID])
            && !listed.contains(k)
        {
            headers.append(k.clone(), v.clone());
        }
    }
    headers
}

/// The answer's head as the caller gets it: one hop's headers removed, those its
/// `Connection` lists too, and none that acts on this listener's origin rather than on the
/// answer ([`ORIGIN_WIDE`]). An internal system's page shares that origin with the
/// dashboard, so it gets an origin of its own (`Content-Security-Policy: sandbox`: no script
/// of it can read the dashboard or act with a signed-in user's session), and `nosniff` keeps
/// a browser from reading an answer as another type than the one it says.
pub(super) fn response_filter(headers: &mut HeaderMap) {
    tunnel::hop::strip_answer(headers, DROPPED);
    for name in ORIGIN_WIDE {
        headers.remove(*name);
    }
    let cors: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("access-control-"))
        .cloned()
        .collect();
    for name in cors {
        headers.remove(name);
    }
    private_cache(headers);
    headers.append(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

/// Fields that may not end an answer (RFC 9110 §6.5.1: framing, routing, authentication,
/// content metadata, caching), which hyper already keeps from HTTP/1.1 callers; HTTP/2 callers
/// would get them.
const NOT_TRAILERS: &[&str] = &[
    "cache-control",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "max-forwards",
    "trailer",
];

/// The trailer fields of an answer as the caller gets them: what its head would lose, and
/// what no trailer may carry, go (over HTTP/2 a caller gets trailers without asking).
pub(super) fn trailer_filter(trailers: &mut HeaderMap) {
    tunnel::hop::strip(trailers, DROPPED);
    tunnel::hop::strip(trailers, ORIGIN_WIDE);
    tunnel::hop::strip(trailers, NOT_TRAILERS);
    tunnel::hop::strip(trailers, &["access-control-*"]);
}

/// Answer headers that a browser applies to the whole origin, here the cloud's (the
/// dashboard's): a cookie (the caller's own never reach the internal system either), HSTS
/// (which would pin the cloud's host, and with `includeSubDomains` its siblings, to HTTPS),
/// `Alt-Svc` (another server for the origin), `Clear-Site-Data` (which would sign every
/// dashboard user out), `Service-Worker-Allowed` (a worker's scope widened to every page),
/// `NEL` and `Report-To`/`Reporting-Endpoints` (every later request to the origin reported to
/// a server of the internal system's choosing), `Accept-CH`/`Critical-CH` (client hints asked
/// of every page). Two more act on the user rather than the answer: `Refresh` (a redirect
/// away from the cloud's address after a delay) and `WWW-Authenticate` (a password prompt
/// that the bridge's credentials made moot: what the user typed would go to the cloud, and no
/// further). `Access-Control-*` go too (in [`response_filter`]): an internal system's CORS
/// policy was written for its own origin, and would let another site read answers here.
const ORIGIN_WIDE: &[&str] = &[
    "set-cookie",
    "strict-transport-security",
    "alt-svc",
    "clear-site-data",
    "service-worker-allowed",
    "nel",
    "report-to",
    "reporting-endpoints",
    "accept-ch",
    "critical-ch",
    "refresh",
    "www-authenticate",
];

/// An answer to a request made with an API key is that key's org's: `Cache-Control` becomes
/// `private` first (`public` and `s-maxage` dropped, the rest kept, from every
/// `Cache-Control` line), so that no shared cache in front of the cloud serves it to another
/// org asking for the same URL (bridge names repeat across orgs). `no-store` already says
/// more; a value that is not text becomes `no-store`.
fn private_cache(headers: &mut HeaderMap) {
    let mut given = Vec::new();
    for value in headers.get_all(header::CACHE_CONTROL) {
        let Ok(text) = value.to_str() else {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return;
        };
        given.extend(directives(text));
    }
    let kept: Vec<&str> = given
        .into_iter()
        .filter(|d| {
            let name = d.split('=').next().unwrap_or_default().trim();
            !name.eq_ignore_ascii_case("public") && !name.eq_ignore_ascii_case("s-maxage")
        })
        .collect();
    let said = |d: &&str| d.eq_ignore_ascii_case("private") || d.eq_ignore_ascii_case("no-store");
    let value = if kept.iter().any(said) {
        kept.join(", ")
    } else {
        std::iter::once("private")
            .chain(kept)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(header::CACHE_CONTROL, value);
    }
}

/// The directives of a `Cache-Control` value: split at commas outside quoted strings
/// (`no-cache="a, b"` is one), trimmed, empty ones left out.
fn directives(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if std::mem::take(&mut escaped) => {}
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(value[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(value[start..].trim());
    out.retain(|d| !d.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(given: Option<&'static str>) -> String {
        let mut headers = HeaderMap::new();
        if let Some(v) = given {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(v));
        }
        private_cache(&mut headers);
        headers[header::CACHE_CONTROL].to_str().unwrap().to_string()
    }

    #[test]
    fn underscored_spellings_of_dropped_headers_are_dropped_too() {
        let mut from = HeaderMap::new();
        for (k, v) in [
            ("x_bridge_principal", "sigapi_other"),
            ("x-bridge-org", "2"),
            ("Cookie", "a=b"),
            ("proxy_authorization", "Basic eA=="),
            ("api_key", "kept"),
            ("x_request_id", "chosen-by-the-caller"),
            ("x-request-id", "chosen-too"),
        ] {
            from.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_static(v),
            );
        }
        let passed = request_filter(&from);
        let names: Vec<&str> = passed.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["api_key"]);
    }

    #[test]
    fn answers_are_never_for_shared_caches() {
        assert_eq!(cache(None), "private");
        assert_eq!(
            cache(Some("public, max-age=600, s-maxage=60")),
            "private, max-age=600"
        );
        assert_eq!(cache(Some("no-store")), "no-store");
        assert_eq!(cache(Some("private, max-age=5")), "private, max-age=5");
        assert_eq!(
            cache(Some(r#"must-revalidate, no-cache="a, b""#)),
            r#"private, must-revalidate, no-cache="a, b""#
        );
        let mut two = HeaderMap::new();
        two.append(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=60"),
        );
        two.append(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        private_cache(&mut two);
        assert_eq!(two.get_all(header::CACHE_CONTROL).iter().count(), 1);
        assert_eq!(two[header::CACHE_CONTROL], "max-age=60, no-store");
    }
}
