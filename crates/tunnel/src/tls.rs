//! TLS 1.3 configurations of both ends of the tunnel (rustls, ring provider).
//!
//! The bridge verifies the cloud against the system roots or `tls_ca_file`, and presents its
//! client certificate; the cloud asks every TLS client for a certificate signed by its internal
//! CA but lets clients without one through the handshake, because the Signals API and enrollment
//! use the same port — the connect route refuses a tunnel without a verified certificate.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// A TLS configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// No usable trust anchor.
    #[error("no trusted CA certificate could be loaded: {0}")]
    NoRoots(String),
    /// The client verifier could not be built.
    #[error("cannot build the client-certificate verifier: {0}")]
    Verifier(String),
}

/// The crypto provider both sides use.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Whom the bridge trusts as the cloud.
pub enum Trust {
    /// These CAs (`tls_ca_file`, or the public ones).
    Roots(RootCertStore),
    /// Anything (`tls_verify: false`, development only).
    Anyone,
}

/// The bridge's client config: TLS 1.3 only, optional client certificate.
pub fn client_config(
    trust: Trust,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match trust {
        Trust::Roots(roots) => {
            if roots.is_empty() {
                return Err(TlsConfigError::NoRoots(
                    "the trust store is empty: set tls_ca_file".into(),
                ));
            }
            builder.with_root_certificates(roots)
        }
        Trust::Anyone => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider()))),
    };
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The cloud's client-certificate verifier: certificates must chain to one of `cas`, but a
/// client may present none (the route decides).
pub fn optional_client_verifier(
    cas: Vec<CertificateDer<'static>>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsConfigError> {
    WebPkiClientVerifier::builder_with_provider(roots(cas)?, provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))
}

/// A verifier that accepts only client certificates chaining to `cas`: used after the
/// handshake to learn which of several trusted CAs issued a certificate (by signature, not by
/// the issuer's name, which anyone can copy).
pub fn client_verifier(
    cas: Vec<CertificateDer<'static>>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsConfigError> {
    WebPkiClientVerifier::builder_with_provider(roots(cas)?, provider())
        .build()
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))
}

fn roots(cas: Vec<CertificateDer<'static>>) -> Result<Arc<RootCertStore>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots
            .add(ca)
            .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
    }
    Ok(Arc::new(roots))
}

/// Accepts any server certificate (`tls_verify: false`, and a database's `sslmode` `prefer`
/// or `require`); signatures are still checked.
pub fn unverified_server() -> Arc<dyn ServerCertVerifier> {
    Arc::new(NoVerification(provider()))
}

#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
