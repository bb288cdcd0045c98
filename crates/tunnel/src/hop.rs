//! Headers that belong to one hop (RFC 9110 §7.6.1): the standard ones, and whatever a
//! message's own `Connection` header names. Both ends of the tunnel remove them, both ways, so a
//! caller cannot make the internal system see a header it marked as its own hop's, nor the
//! reverse; only an answer's `Trailer` passes ([`strip_answer`]).

use http::{HeaderMap, HeaderName, HeaderValue, header};

/// The names the message's `Connection` header lists (`Connection: close, x-secret` names
/// `x-secret`; `close` and `keep-alive` are options, not headers, and are harmless to list).
pub fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// Whether `name` is one of `names` (lowercase; a name ending in `*` is a prefix, so
/// `x-forwarded-*` covers `x-forwarded-port` and every other member of that family), with
/// `_` read as `-`: CGI, WSGI and Rack servers read `X_Forwarded_For` as `X-Forwarded-For`.
pub fn is_named(name: &HeaderName, names: &[&str]) -> bool {
    let spelled = name.as_str();
    let name: std::borrow::Cow<'_, str> = if spelled.contains('_') {
        spelled.replace('_', "-").into()
    } else {
        spelled.into()
    };
    names.iter().any(|n| match n.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *n,
    })
}

/// Removes the headers `names` (as [`is_named`] reads them) and every header `Connection`
/// lists. One pass over the message's few headers, not one lookup per listed name: this runs
/// on every forwarded request and response.
pub fn strip(headers: &mut HeaderMap, names: &[&str]) {
    let listed = connection_listed(headers);
    let named = |k: &HeaderName| is_named(k, names);
    let present: Vec<HeaderName> = headers
        .keys()
        .filter(|k| named(k) || listed.contains(k))
        .cloned()
        .collect();
    for name in present {
        headers.remove(name);
    }
}

/// [`strip`] for an answer's head, which keeps its `Trailer` (unless its `Connection` lists
/// it): that header names the trailer fields the answer ends with, and an HTTP/1.1 server
/// sends a caller that asked for trailers (`TE: trailers`) only the fields it names.
pub fn strip_answer(headers: &mut HeaderMap, names: &[&str]) {
    let declared: Vec<HeaderValue> = if connection_listed(headers).contains(&header::TRAILER) {
        Vec::new()
    } else {
        headers.get_all(header::TRAILER).iter().cloned().collect()
    };
    strip(headers, names);
    headers.remove(header::TRAILER);
    for value in declared {
        headers.append(header::TRAILER, value);
    }
}

/// Whether `name` is sent more than once: a header meant to be single (`Authorization`,
/// `Content-Type`) that a proxy in front and this service could each read differently.
pub fn repeated(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> bool {
    headers.get_all(name).iter().nth(1).is_some()
}

/// The message's transfer codings when one is neither `chunked` nor `identity` (`gzip,
/// chunked`), as sent: HTTP/1.1
/// libraries remove only the chunking, and `Transfer-Encoding` belongs to one hop, so a body
/// passed on without it would reach the other end still compressed, with nothing saying so.
pub fn coded_transfer(headers: &HeaderMap) -> Option<String> {
    let codings: Vec<String> = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    codings
        .iter()
        .any(|c| c != "chunked" && c != "identity")
        .then(|| codings.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_keeps_its_trailer_declaration_unless_connection_lists_it() {
        let mut h = HeaderMap::new();
        h.append("trailer", "x-a".parse().unwrap());
        h.append("trailer", "x-b".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        strip_answer(&mut h, &["te", "trailer"]);
        let kept: Vec<_> = h.get_all("trailer").iter().collect();
        assert_eq!(kept, ["x-a", "x-b"]);
        assert!(!h.contains_key("te"));
        h.insert("connection", "trailer".parse().unwrap());
        strip_answer(&mut h, &["connection", "trailer"]);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn connection_named_headers_go_with_the_listed_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            "close, X-Hop-Secret , keep-alive".parse().unwrap(),
        );
        h.insert("x-hop-secret", "1".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("x-kept", "2".parse().unwrap());
        h.insert("x-forwarded-port", "443".parse().unwrap());
        h.insert("x-forwarded", "1".parse().unwrap());
        h.insert("x_forwarded_for", "10.0.0.1".parse().unwrap());
        h.insert("x_http_method_override", "DELETE".parse().unwrap());
        strip(&mut h, &["connection", "te", "x-forwarded-*"]);
        assert_eq!(h.len(), 3, "{h:?}");
        assert!(
            !h.contains_key("x_forwarded_for"),
            "underscores read as hyphens"
        );
        assert!(
            h.contains_key("x-forwarded"),
            "a prefix covers longer names only"
        );
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn only_chunked_framing_is_plain() {
        let mut h = HeaderMap::new();
        assert_eq!(coded_transfer(&h), None);
        h.insert("transfer-encoding", "Chunked".parse().unwrap());
        assert_eq!(coded_transfer(&h), None);
        h.insert("transfer-encoding", "identity".parse().unwrap());
        assert_eq!(coded_transfer(&h), None, "identity is no coding");
        h.insert("transfer-encoding", "gzip, chunked".parse().unwrap());
        assert_eq!(coded_transfer(&h).as_deref(), Some("gzip, chunked"));
    }
}
