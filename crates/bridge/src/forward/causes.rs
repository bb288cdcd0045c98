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
    if text.contains("CaUsedAsEndEntity") {
        text.push_str(" (the server presents a CA certificate as its own, as `openssl req -x509` makes: give it a server certificate signed by that CA, and give that CA as tls_ca_file)");
    }
    text
}

/// What of [`causes`] a caller is told: the kind of failure, never the words under it, which
/// can name internal hosts (a certificate "only valid for" its names) and addresses. The
/// bridge's log keeps the whole chain.
pub(crate) fn caller_summary(causes: &str) -> &'static str {
    caller_words(causes).0
}

/// What the caller is told to check for the failure [`caller_summary`] names: the advice that
/// fits it, not every one.
pub(crate) fn caller_advice(causes: &str) -> &'static str {
    caller_words(causes).1
}

fn caller_words(causes: &str) -> (&'static str, &'static str) {
    const CONNECT: &str = "Check that the bridge host can connect to it";
    let has = |needle: &str| causes.contains(needle);
    if has("answered in plain text, not TLS") {
        (
            "it answered in plain text, not TLS",
            "Its port does not speak TLS: give the entry an http:// url if it serves plain HTTP, or the port where it speaks TLS",
        )
    } else if has("no TLS session within") {
        (
            "connecting or its TLS handshake timed out",
            "Check that the bridge host can connect to it and that the url's port speaks TLS (a plain-HTTP service waits for a request and never answers the TLS hello)",
        )
    } else if has("handshake eof") {
        (
            "it closed the connection during the TLS handshake",
            "Check that the url's port speaks TLS (a plain-HTTP or other service closes it so)",
        )
    } else if has("certificate") || has("Certificate") || has("tls") || has("TLS") {
        (
            "the TLS handshake failed",
            "Check that the entry's tls_ca_file (or the system roots) vouches for its certificate, and that the certificate names the url's host",
        )
    } else if has("dns error") {
        ("its name did not resolve", CONNECT)
    } else if has("Connection refused") {
        ("the connection was refused", CONNECT)
    } else if has("timed out") || has("deadline") {
        ("connecting timed out", CONNECT)
    } else {
        ("the connection failed", CONNECT)
    }
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

/// Whether the internal system took the connection and then closed or reset it before a whole
/// answer's head: it was reached, so the words are not "cannot reach".
pub(super) fn closed_without_answer(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    let (mut connected, mut closed) = (false, false);
    let mut source = Some(e);
    while let Some(inner) = source {
        if let Some(client) = inner.downcast_ref::<hyper_util::client::legacy::Error>() {
            connected |= !client.is_connect();
        }
        closed |= inner
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
            || inner.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(io.kind(), ConnectionReset | BrokenPipe | UnexpectedEof)
            });
        source = inner.source();
    }
    connected && closed
}

#[cfg(test)]
mod tests {
    use super::caller_summary;

    #[test]
    fn callers_learn_the_kind_of_failure_not_its_words() {
        let tls = r#"client error (Connect): invalid peer certificate: certificate not valid for name "billing.corp.internal"; certificate is only valid for DnsName("db.corp.internal")"#;
        assert_eq!(caller_summary(tls), "the TLS handshake failed");
        let refused =
            "client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(caller_summary(refused), "the connection was refused");
        let dns = "client error (Connect): dns error: failed to lookup address information: Name or service not known";
        assert_eq!(caller_summary(dns), "its name did not resolve");
        assert_eq!(
            caller_summary("client error (Connect): tcp connect error: deadline has elapsed"),
            "connecting timed out"
        );
    }

    /// Each kind of failure gets the advice that fits it, not every advice at once.
    #[test]
    fn callers_are_told_what_to_check_for_that_failure() {
        let advice = super::caller_advice;
        let plain = "client error (Connect): received corrupt message of type InvalidContentType (the server answered in plain text, not TLS: use an http:// URL, or the port where it speaks TLS)";
        assert!(advice(plain).contains("http:// url"), "{}", advice(plain));
        assert!(!advice(plain).contains("tls_ca_file"));
        let tls = "client error (Connect): invalid peer certificate: UnknownIssuer";
        assert!(advice(tls).contains("tls_ca_file"), "{}", advice(tls));
        let eof = "client error (Connect): tls handshake eof";
        assert_eq!(
            super::caller_summary(eof),
            "it closed the connection during the TLS handshake"
        );
        assert!(advice(eof).contains("speaks TLS"), "{}", advice(eof));
        let stalled = "client error (Connect): no TLS session within 10 s: connecting or the TLS handshake timed out";
        assert_eq!(
            super::caller_summary(stalled),
            "connecting or its TLS handshake timed out"
        );
        assert!(
            advice(stalled).contains("speaks TLS"),
            "{}",
            advice(stalled)
        );
        let refused = "client error (Connect): tcp connect error: Connection refused";
        assert_eq!(
            advice(refused),
            "Check that the bridge host can connect to it"
        );
    }

    /// A self-signed CA certificate served as the server's own is said in words, with the fix.
    #[test]
    fn a_ca_certificate_as_the_server_s_is_explained() {
        #[derive(Debug)]
        struct Rustls;
        impl std::fmt::Display for Rustls {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))")
            }
        }
        impl std::error::Error for Rustls {}
        let text = super::causes(&Rustls);
        assert!(
            text.contains("presents a CA certificate as its own"),
            "{text}"
        );
        assert_eq!(super::caller_summary(&text), "the TLS handshake failed");
    }
}
