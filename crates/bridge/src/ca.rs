//! The CA files an operator gives the bridge for its internal servers (an entry's
//! `tls_ca_file`, a database's `sslrootcert`): read at start to check them, and again by each
//! client that trusts them. An error names the file and what to give instead.

use std::path::Path;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The certificates of a CA file; an error names the file and what is wrong.
pub fn load(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "{}: cannot read certificates from it ({e}); give the PEM file of the CA that signs the internal server's certificate",
                path.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in it (expected the CA that signs the internal server's certificate)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The roots to trust: those of `file` when one is given, else the public roots.
pub fn roots(file: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    match file {
        None => Ok(tunnel::roots::public()),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(load(path)?);
            Ok(roots)
        }
    }
}
