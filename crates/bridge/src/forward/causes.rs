//! Why a request to an internal system failed, in words: the whole chain of causes, and
//! whether the system answered at all.

/// An error and its sources, outermost first: hyper's own message ("client error (Connect)")
/// says nothing of the refused connection or the unknown certificate underneath. A server
/// that answered TLS in plain text is said as such.
pub(crate) fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    if text.contains("InvalidContentType") {
        text.push_str(" (the server answered in plain text, not TLS: use an http:// URL, or the port where it speaks TLS)");
    }
    text
}

/// Whether the internal system answered, but with a head the HTTP/1.1 client would not parse
/// (too many fields, too large, malformed): not a reachability problem.
pub(super) fn unreadable_head(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(inner) = source {
        if inner
            .downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_parse() || h.is_parse_too_large())
        {
            return true;
        }
        source = inner.source();
    }
    false
}
