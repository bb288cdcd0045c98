//! A private CA for test servers that speak TLS (an internal API over HTTPS, a peer that
//! goes silent after the handshake), as a customer's internal PKI would issue.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed CA that signs server certificates.
pub struct TestCa {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    /// A fresh CA named `Test internal CA`.
    pub fn new() -> Self {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Test internal CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            cert,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Writes the CA certificate as PEM into `dir/name` and returns the path.
    pub fn write_pem(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem()).expect("write CA PEM");
        path
    }

    /// A certificate for `host` signed by this CA and its key, both PEM (for servers that read
    /// files, such as PostgreSQL).
    pub fn server_pem(&self, host: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("server key");
        let params = rcgen::CertificateParams::new(vec![host.to_string()]).expect("server params");
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        (cert.pem(), key.serialize_pem())
    }

    /// A TLS server configuration with a certificate for `host` signed by this CA.
    pub fn server_config(&self, host: &str) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("server key");
        let params = rcgen::CertificateParams::new(vec![host.to_string()]).expect("server params");
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
        Arc::new(config)
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}
