//! The public CAs trusted where nothing more specific is configured (the bridge without a
//! `tls_ca_file`, the cloud's webhook deliveries): the system's store, or, where the system
//! has none (the `FROM scratch` container images have no `/etc/ssl`), Mozilla's set compiled
//! into the binary (webpki-roots). The images then still verify public certificates, and a
//! host's own store, when it has one, still wins.

use rustls::RootCertStore;

/// The system's CA certificates, or the embedded set when the system offers none.
pub fn public() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_set_is_never_empty() {
        // The fallback a scratch image relies on: if this were empty, such an image would trust
        // nothing and every public HTTPS resource would fail.
        assert!(webpki_roots::TLS_SERVER_ROOTS.len() > 100);
        assert!(!super::public().is_empty());
    }
}
