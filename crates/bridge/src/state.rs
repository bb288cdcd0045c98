//! What the bridge keeps in `state_dir`: its enrolled client certificate and key, so that a
//! restarted bridge reconnects with them instead of enrolling again. Without `state_dir` the
//! certificate lives in memory only.
//!
//! The key file is written with mode 0600, both files through a temporary name and a rename,
//! so a crash never leaves half a key. A saved certificate is only a shortcut: one the cloud
//! does not accept (another cloud, a new CA) is dropped and the bridge enrolls again.

use std::io::Write;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The certificate chain file in `state_dir`.
pub const CERT_FILE: &str = "bridge-cert.pem";
/// The private key file in `state_dir`.
pub const KEY_FILE: &str = "bridge-key.pem";

/// A certificate and key read back from `state_dir`.
pub struct Saved {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key.
    pub key: PrivateKeyDer<'static>,
}

/// Creates `dir` if needed and checks that files can be written in it (at start-up, so a bad
/// `state_dir` is a configuration error rather than a surprise at the first enrollment).
pub fn prepare(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(probe)
}

/// The saved certificate and key, when both files are there, parse and are a pair (instances
/// sharing `state_dir` that enroll at the same moment may leave one's key beside the other's
/// certificate: such a pair is not used, and the bridge enrolls again). A saved certificate
/// that cannot be used is logged, with why, before the bridge enrolls again.
pub fn load(dir: &Path) -> Option<Saved> {
    if !dir.join(CERT_FILE).exists() {
        return None;
    }
    read_pair(dir)
        .map_err(|why| {
            tracing::warn!(state_dir = %dir.display(), cause = %why, "the client certificate saved in state_dir cannot be used; enrolling again");
        })
        .ok()
}

fn read_pair(dir: &Path) -> Result<Saved, String> {
    let chain = CertificateDer::pem_file_iter(dir.join(CERT_FILE))
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{CERT_FILE}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{CERT_FILE} holds no PEM certificate"));
    }
    let key =
        PrivateKeyDer::from_pem_file(dir.join(KEY_FILE)).map_err(|e| format!("{KEY_FILE}: {e}"))?;
    tunnel::tls::client_config(
        tunnel::tls::Trust::Anyone,
        Some((chain.clone(), key.clone_key())),
    )
    .map_err(|e| format!("{CERT_FILE} and {KEY_FILE} are no pair: {e}"))?;
    Ok(Saved { chain, key })
}

/// Saves a freshly enrolled certificate (PEM) and key (PEM).
pub fn save(dir: &Path, cert_pem: &str, key_pem: &str) -> std::io::Result<()> {
    write_atomically(&dir.join(KEY_FILE), key_pem.as_bytes(), 0o600)?;
    write_atomically(&dir.join(CERT_FILE), cert_pem.as_bytes(), 0o644)
}

/// Removes the saved pair (the cloud did not accept it).
pub fn forget(dir: &Path) {
    for file in [CERT_FILE, KEY_FILE] {
        let _ = std::fs::remove_file(dir.join(file));
    }
}

fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    // A name of this process's own: instances sharing the directory never write one file.
    let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_pair_reads_back_and_the_key_is_private() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path()).unwrap();
        assert!(load(dir.path()).is_none(), "nothing saved yet");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        save(dir.path(), &cert.pem(), &key.serialize_pem()).unwrap();
        let saved = load(dir.path()).expect("saved pair");
        assert_eq!(saved.chain.len(), 1);
        // Another enrollment's key beside this certificate: not a pair, not used.
        let other = rcgen::KeyPair::generate().unwrap();
        save(dir.path(), &cert.pem(), &other.serialize_pem()).unwrap();
        assert!(
            load(dir.path()).is_none(),
            "a certificate with another's key"
        );
        save(dir.path(), &cert.pem(), &key.serialize_pem()).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        forget(dir.path());
        assert!(load(dir.path()).is_none());
    }
}
