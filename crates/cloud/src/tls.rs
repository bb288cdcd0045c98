//! TLS for `--listen`: the internal CA (made on first start and kept in the database, so every
//! `cloud` process on it shares one; exported to `DIR/ca.pem`) signs the server's certificate
//! unless `--tls-cert/--tls-key` are given, and bridges' client certificates. TLS 1.3 only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setup problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Which file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{path}: {what}; expected a PEM file")]
    Pem {
        /// Which file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// `--tls-key` is not the key of `--tls-cert`'s first certificate.
    #[error(
        "--tls-key {key} is not the key of the first certificate in --tls-cert {cert}: give the key that certificate was made for, with the server's own certificate first in the file"
    )]
    KeyMismatch {
        /// The certificate chain's file.
        cert: PathBuf,
        /// The key's file.
        key: PathBuf,
    },
    /// `--tls-cert`'s certificate has an RSA key shorter than the 2048 bits TLS accepts.
    #[error(
        "--tls-cert {cert}: its key is RSA of {bits} bits, and RSA keys shorter than 2048 bits are refused: make a new key of 2048 bits or more (openssl genrsa 3072), or an ECDSA P-256 one, and a certificate for it"
    )]
    ShortRsaKey {
        /// The certificate chain's file.
        cert: PathBuf,
        /// The key's size.
        bits: usize,
    },
    /// Certificate generation failed.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate/key pair.
    #[error("the TLS certificate and key do not form a usable pair: {0}")]
    Rustls(#[from] rustls::Error),
    /// The CA certificate cannot serve as a trust anchor.
    #[error("the CA certificate cannot verify client certificates: {0}")]
    Verifier(#[from] tunnel::tls::TlsConfigError),
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Io {
        action: "cannot read",
        path: path.into(),
        source,
    })
}

/// Writes a private file (`ca-key.pem`), mode 0600 whatever the umask. One found readable by
/// others is made private before the key is written, with a warning.
fn write_private(path: &Path, contents: &str) -> Result<(), TlsError> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let failed = |source| TlsError::Io {
        action: "cannot write",
        path: path.into(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(path).map_err(failed)?;
    #[cfg(unix)]
    {
        let mode = file.metadata().map_err(failed)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(file = %path.display(), mode = format!("{mode:o}"), "the internal CA's key was readable by other users; made it private (0600)");
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(failed)?;
        }
    }
    file.write_all(contents.as_bytes()).map_err(failed)
}

/// How long the internal CA is valid: long enough that bridges do not outlive it in normal
/// operation, short enough for an auditor (rotation: docs/operations.md, "Security").
const CA_VALIDITY_DAYS: i64 = 3650;
/// How long a server certificate made at start is valid (it is made anew at every start).
const SERVER_VALIDITY_DAYS: i64 = 397;

/// Valid from an hour ago (clocks drift) for `days`.
fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// Writes a file everyone may read (`ca.pem`: clients are told to trust it), mode 0644
/// whatever the umask or the mode it had.
fn write_public(path: &Path, contents: &str) -> Result<(), TlsError> {
    let failed = |source| TlsError::Io {
        action: "cannot write",
        path: path.into(),
        source,
    };
    std::fs::write(path, contents).map_err(failed)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(failed)?;
    }
    Ok(())
}

/// The service's own certificate authority.
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    /// Accepts only certificates this CA signed.
    verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    /// The CA certificate, PEM (what clients trust: `DIR/ca.pem`).
    pub cert_pem: String,
}

impl LocalCa {
    /// A new CA: (certificate PEM, private key PEM).
    pub fn generate() -> Result<(String, String), TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "signals local CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        valid_for(&mut params, CA_VALIDITY_DAYS);
        let cert = params.self_signed(&key)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The CA from its certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        let der =
            CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| TlsError::Pem {
                path: "ca.pem".into(),
                what: e.to_string(),
            })?;
        Ok(LocalCa {
            issuer,
            verifier: tunnel::tls::client_verifier(vec![der])?,
            cert_pem: cert_pem.to_string(),
        })
    }

    /// Whether this CA signed `cert` (a valid client certificate chaining to it). The issuer's
    /// name alone proves nothing: every deployment's CA has the same one, and an operator's CA
    /// trusted with `--client-ca` could copy it.
    pub fn issued(&self, cert: &CertificateDer<'_>) -> bool {
        self.verifier
            .verify_client_cert(cert, &[], rustls_pki_types::UnixTime::now())
            .is_ok()
    }

    /// `DIR/ca.pem` and `DIR/ca-key.pem`, when both exist (an older data directory).
    pub fn read_files(dir: &Path) -> Result<Option<(String, String)>, TlsError> {
        let (cert, key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
        if cert.exists() && key.exists() {
            Ok(Some((read(&cert)?, read(&key)?)))
        } else {
            Ok(None)
        }
    }

    /// Writes `DIR/ca.pem` (what clients trust, mode 0644) and `DIR/ca-key.pem` (mode 0600).
    pub fn write_files(dir: &Path, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
            action: "cannot create",
            path: dir.into(),
            source,
        })?;
        write_private(&dir.join("ca-key.pem"), key_pem)?;
        write_public(&dir.join("ca.pem"), cert_pem)
    }

    /// Signs a bridge's certificate request (its parameters already set by the caller).
    pub fn sign_csr(
        &self,
        csr: &rcgen::CertificateSigningRequestParams,
    ) -> Result<String, TlsError> {
        Ok(csr.signed_by(&self.issuer)?.pem())
    }

    /// The CA certificate, DER (the trust anchor for bridges' client certificates).
    pub fn cert_der(&self) -> Result<CertificateDer<'static>, TlsError> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).map_err(|e| TlsError::Pem {
            path: "ca.pem".into(),
            what: e.to_string(),
        })
    }

    /// Issues a server certificate for these DNS names / IP addresses; returns (cert, key) PEM.
    pub fn issue_server(&self, names: &[&str]) -> Result<(String, String), TlsError> {
        let key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "signals cloud");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        valid_for(&mut params, SERVER_VALIDITY_DAYS);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The server's certificate chain and key.
pub struct Identity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key.
    pub key: PrivateKeyDer<'static>,
}

/// A fresh server certificate from `ca` for localhost and `extra_names`, issued at every start
/// when no `--tls-cert/--tls-key` is given: clients trust the CA, so the leaf need not persist,
/// and it always matches the CA that this database shares.
pub fn issued_identity(ca: &LocalCa, extra_names: &[String]) -> Result<Identity, TlsError> {
    let mut names = vec!["localhost", "127.0.0.1", "::1"];
    names.extend(extra_names.iter().map(String::as_str));
    let (cert, key) = ca.issue_server(&names)?;
    let chain = vec![
        CertificateDer::from_pem_slice(cert.as_bytes()).map_err(|e| TlsError::Pem {
            path: "server certificate".into(),
            what: e.to_string(),
        })?,
        ca.cert_der()?,
    ];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| TlsError::Pem {
        path: "server key".into(),
        what: e.to_string(),
    })?;
    Ok(Identity { chain, key })
}

/// Loads `--tls-cert/--tls-key` and checks that they are a pair, before anything is stored: a
/// mistyped option touches no database.
pub fn operator_identity(cert_path: &Path, key_path: &Path) -> Result<Identity, TlsError> {
    let chain = load_certificates(cert_path)?;
    let key =
        PrivateKeyDer::from_pem_slice(read(key_path)?.as_bytes()).map_err(|e| TlsError::Pem {
            path: key_path.to_path_buf(),
            what: match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "holds no private key (a PRIVATE KEY block): --tls-key takes the key of --tls-cert's certificate".to_string()
                }
                e => e.to_string(),
            },
        })?;
    ServerConfig::builder_with_provider(tunnel::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| match (e, rsa_bits(&chain[0])) {
            (rustls::Error::InconsistentKeys(_), _) => TlsError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            },
            (_, Some(bits)) if bits < 2048 => TlsError::ShortRsaKey {
                cert: cert_path.to_path_buf(),
                bits,
            },
            (e, _) => e.into(),
        })?;
    Ok(Identity { chain, key })
}

/// The size of a certificate's RSA key, when it has one.
fn rsa_bits(cert: &CertificateDer<'_>) -> Option<usize> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    match cert.public_key().parsed().ok()? {
        x509_parser::public_key::PublicKey::RSA(rsa) => Some(rsa.key_size()),
        _ => None,
    }
}

/// What to warn of in the operator's certificate (`--tls-cert`'s first): that it has expired,
/// or is not valid yet. Clients refuse it then, yet a server may have to start with it (a
/// renewal on its way), so it is said, not refused.
pub fn validity_warning(chain: &[CertificateDer<'_>]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(chain.first()?.as_ref()).ok()?;
    let validity = cert.validity();
    let now = x509_parser::time::ASN1Time::now();
    if validity.not_after < now {
        Some(format!(
            "the --tls-cert certificate expired on {}: clients refuse it; renew it",
            validity.not_after
        ))
    } else if validity.not_before > now {
        Some(format!(
            "the --tls-cert certificate is not valid before {}: clients refuse it until then (is this host's clock right?)",
            validity.not_before
        ))
    } else {
        None
    }
}

/// Checks that the client-certificate verifier takes `cas` (the operator's `--client-ca`), so
/// that a file it refuses is said before anything is stored.
pub fn check_client_cas(cas: &[CertificateDer<'static>]) -> Result<(), TlsError> {
    tunnel::tls::optional_client_verifier(cas.to_vec())
        .map(drop)
        .map_err(|e| TlsError::Pem {
            path: "client CA".into(),
            what: e.to_string(),
        })
}

/// The certificates of a PEM file (a chain, or the CAs of `--client-ca`); at least one.
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let cas = CertificateDer::pem_slice_iter(read(path)?.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    if cas.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no CERTIFICATE block".into(),
        });
    }
    Ok(cas)
}

/// The subjects of the certificates in `certs` that are not CA certificates (no basic
/// constraints with `CA:TRUE`): in a `--client-ca` bundle such a certificate is usually a
/// leaf given by mistake, and it would be trusted as a root.
pub fn non_ca_subjects(certs: &[CertificateDer<'_>]) -> Vec<String> {
    certs
        .iter()
        .filter_map(|der| {
            let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
            let is_ca = cert
                .basic_constraints()
                .ok()
                .flatten()
                .is_some_and(|bc| bc.value.ca);
            (!is_ca).then(|| cert.subject().to_string())
        })
        .collect()
}

/// A TLS 1.3-only server config offering HTTP/2 and HTTP/1.1.
///
/// Clients may present a certificate signed by one of `client_cas` (bridges do); the tunnel
/// route requires one, the rest of the API does not.
pub fn server_config(
    identity: Identity,
    client_cas: Vec<CertificateDer<'static>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier =
        tunnel::tls::optional_client_verifier(client_cas).map_err(|e| TlsError::Pem {
            path: "client CA".into(),
            what: e.to_string(),
        })?;
    let mut config = ServerConfig::builder_with_provider(tunnel::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)?;
    // `postgresql`: PostgreSQL 17's direct TLS on the same port (crate::pgwire).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"postgresql".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS config of the port's PostgreSQL connections: `main`'s certificate, ALPN
/// `postgresql` only, and no client certificate asked for. libpq sends
/// `~/.postgresql/postgresql.crt` whenever a server asks, and a certificate of another CA
/// would fail the handshake: a client of the database route signs in with an API key.
pub fn postgres_config(main: &ServerConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(tunnel::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_cert_resolver(main.cert_resolver.clone());
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Arc::new(config))
}

/// The cloud's own CA as clients meet it: the file to trust, and the names its certificate is
/// issued for (a page reached by another name is served by a front with its own certificate).
#[derive(Debug, Clone)]
pub struct OwnCa {
    /// `DIR/ca.pem`, absolute.
    pub file: String,
    /// localhost, 127.0.0.1, ::1 and `--tls-names`.
    pub names: Vec<String>,
}

#[cfg(test)]
mod tests;
