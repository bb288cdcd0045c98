//! Where the data lives: the backend chosen on the command line, the SQLite file's privacy
//! and `cloud serve`'s exclusive hold on it, and whether opening may create it.

use std::path::Path;

use super::StorageError;

/// Where the data lives, as chosen on the command line. `Debug` hides the URL's password.
#[derive(Clone)]
pub enum Backend {
    /// An SQLite file (created when missing), in WAL mode with full fsync on commit.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL connection URL (`postgres://…`).
    Postgres(String),
}

impl Backend {
    /// Picks PostgreSQL when a URL is given, else SQLite in `data_dir/signals.db`.
    pub fn choose(data_dir: &Path, database_url: Option<&str>) -> Result<Self, StorageError> {
        match database_url {
            None => Ok(Backend::Sqlite(data_dir.join("signals.db"))),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Backend::Postgres(url.to_string()))
            }
            Some(url) if url.starts_with("sqlite:") => Ok(Backend::Sqlite(
                url.trim_start_matches("sqlite://")
                    .trim_start_matches("sqlite:")
                    .into(),
            )),
            Some(other) => Err(StorageError::BadUrl(redact_url(other))),
        }
    }
}

/// `cloud serve`'s exclusive hold on an SQLite database, for as long as it is kept: event ids
/// carry sequence numbers that one process hands out ([`ids`]), so a second server on the same
/// file is refused at start. Admin commands do not take it and may run alongside. The lock
/// file is removed when the hold ends, so a server that stops (or refuses the database) leaves
/// nothing beside it.
#[derive(Debug)]
pub struct ServeLock {
    held: Option<(std::fs::File, std::path::PathBuf)>,
}

impl Drop for ServeLock {
    fn drop(&mut self) {
        // Removed while still locked: a server starting meanwhile makes a new file and holds it.
        if let Some((file, path)) = self.held.take() {
            let _ = std::fs::remove_file(&path);
            drop(file);
        }
    }
}

impl ServeLock {
    /// Takes the lock of `backend` (none is needed on PostgreSQL).
    pub fn acquire(backend: &Backend) -> Result<ServeLock, StorageError> {
        let Backend::Sqlite(path) = backend else {
            return Ok(ServeLock { held: None });
        };
        let mut lock_path = path.clone().into_os_string();
        lock_path.push(".serve-lock");
        let lock_path = std::path::PathBuf::from(lock_path);
        let failed = |cause: &dyn std::fmt::Display| StorageError::Lock {
            file: lock_path.display().to_string(),
            cause: cause.to_string(),
        };
        if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(&e))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        // A server that stops removes the file: one opened just before is locked in vain (no
        // other server would find it), so the lock counts only on the file still at the path.
        for _ in 0..3 {
            let file = options.open(&lock_path).map_err(|e| failed(&e))?;
            match file.try_lock() {
                Ok(()) if still_at(&file, &lock_path) => {
                    return Ok(ServeLock {
                        held: Some((file, lock_path)),
                    });
                }
                Ok(()) => continue,
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(StorageError::InUse(path.display().to_string()));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(failed(&e)),
            }
        }
        Err(StorageError::InUse(path.display().to_string()))
    }
}

/// Whether `file` is the file at `path` now (not one removed, or replaced, since it was opened).
fn still_at(file: &std::fs::File, path: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Backend::Postgres(url) => f.debug_tuple("Postgres").field(&redact_url(url)).finish(),
        }
    }
}

/// The URL without its password: neither `user:password@` nor a `password=` parameter.
pub fn redact_url(url: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &base[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{}@{}", &base[..scheme], user, &base[at + 1..])
        }
        _ => base.to_string(),
    };
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

/// Makes the SQLite database private (mode 0600) whatever the umask: it holds every org's
/// events and the internal CA's private key. SQLite gives its `-wal` and `-shm` files the
/// database file's mode, so creating the file first, private, covers them too. A database
/// found readable by others is made private, with a warning.
pub(super) fn private_files(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let mut names = vec![path.to_path_buf()];
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            names.push(name.into());
        }
        // One warning for the files a readable database left readable (its -wal and -shm take
        // its mode), not one per file.
        let mut fixed = Vec::new();
        for file in names {
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
                fixed.push(format!("{} (mode {mode:o})", file.display()));
            }
        }
        if !fixed.is_empty() {
            tracing::warn!(files = %fixed.join(", "), "the database was readable by other users (it holds every org's events and the internal CA's key); made it private (0600)");
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Whether opening may create the database: `cloud serve` does; admin commands never do, so
/// one run from the wrong directory cannot make an empty database that no server reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the SQLite file (and its directory) or the PostgreSQL schema when missing.
    CreateIfMissing,
    /// Refuse, with [`StorageError::NotCreated`], a database that `serve` has not created.
    MustExist,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_counts_only_on_the_file_still_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signals.db.serve-lock");
        let opened = std::fs::File::create(&path).unwrap();
        assert!(still_at(&opened, &path));
        // A stopping server removed it after this one opened it: no other would find it.
        std::fs::remove_file(&path).unwrap();
        assert!(!still_at(&opened, &path));
        std::fs::File::create(&path).unwrap();
        assert!(
            !still_at(&opened, &path),
            "a new file at the path is another lock"
        );
    }

    #[test]
    fn a_stopped_server_leaves_no_lock_file_and_the_next_one_locks() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::Sqlite(dir.path().join("signals.db"));
        let first = ServeLock::acquire(&backend).unwrap();
        assert!(matches!(
            ServeLock::acquire(&backend),
            Err(StorageError::InUse(_))
        ));
        drop(first);
        assert!(!dir.path().join("signals.db.serve-lock").exists());
        let _next = ServeLock::acquire(&backend).expect("the next server");
    }
}
