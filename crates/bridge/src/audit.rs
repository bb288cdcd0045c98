//! The hash-chained audit log (docs/bridge.md, "Audit log").
//!
//! Every forwarded request writes one [`AuditRecord`] as a JSON line with `"type":"audit"` and a
//! `prev` field: the hex SHA-256 of the previous audit line's exact bytes (without its newline),
//! or [`GENESIS_HASH`] for the first. Removing, altering or reordering a record therefore breaks
//! the chain at the next record, which [`verify`] reports. Audit lines may share a file (or
//! stdout) with ordinary JSON log lines; only lines whose JSON has `"type":"audit"` count.
//!
//! A plain hash chain proves no more than that: the last record can be altered, and the file
//! can be cut short or rewritten from some point on, without a trace inside the file itself.
//! A record whose `prev` is all zeros starts a new chain (a restart while writing to stdout);
//! [`VerifySummary::chains`] counts them.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::AuditTarget;

mod record;
mod verify;

pub use record::{AuditRecord, Decision, strip_query_values};
pub use verify::{Anchors, ChainBreak, VerifyError, VerifySummary, anchors, verify, verify_reader};

/// The `type` of an audit line.
pub const AUDIT_TYPE: &str = "audit";
/// The `prev` of the first record of a chain: 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The line as written: the record between `type` and `prev`.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    record: &'a AuditRecord,
    prev: &'a str,
}

/// The hex SHA-256 of one line's bytes (without its newline).
pub fn line_hash(line: &[u8]) -> String {
    format!("{:x}", Sha256::digest(line))
}

/// Why an audit record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The audit file could not be opened or read.
    #[error("{}: cannot open the audit log: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Another process (a second bridge instance on this host) writes the file: two writers
    /// would interleave their chains, and `audit verify` would call the file tampered with.
    #[error(
        "{}: another process writes this audit log (a second bridge instance?): give each instance its own audit_log",
        path.display()
    )]
    InUse {
        /// The file.
        path: PathBuf,
    },
    /// Writing the record failed; the chain still ends at the last record written.
    #[error("cannot write the audit record: {0}")]
    Write(#[from] io::Error),
    /// The record could not be serialised (not expected with these field types).
    #[error("cannot serialise the audit record: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// The writer and the hash of the last audit line it wrote.
struct Chain {
    out: Box<dyn Write + Send>,
    prev: String,
    /// The file ended without a newline (a torn write): start on a fresh line.
    needs_newline: bool,
    /// Chained lines not yet written (only with a flusher; see [`AuditLog::spawn_flusher`]).
    pending: Vec<u8>,
    /// Whether a flusher task writes `pending`; without one every record is written at once.
    deferred: bool,
}

/// A hash-chained audit log writer, shared between request handlers.
pub struct AuditLog {
    chain: Mutex<Chain>,
    /// Wakes the flusher when `pending` stops being empty.
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("prev", &self.last_hash())
            .finish_non_exhaustive()
    }
}

impl Drop for AuditLog {
    /// Records of streams dropped at exit still reach the file.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl AuditLog {
    /// Writes to standard output, starting a new chain.
    pub fn stdout() -> Self {
        Self::from_writer(io::stdout(), None)
    }

    /// Appends to the file at `path` (created if missing), continuing the chain from its last
    /// audit line. The file is locked while the log is open: one writer per file.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        Self::open_with(path, true)
    }

    /// [`AuditLog::open`], taking the writer's lock only when `lock` (`bridge check` opens a
    /// running bridge's file only to see that it could; on Unix only, where the lock is
    /// advisory: Windows' would keep readers such as `audit verify` out).
    fn open_with(path: &Path, lock: bool) -> Result<Self, AuditError> {
        let open_error = |source| AuditError::Open {
            path: path.to_owned(),
            source,
        };
        let mut options = OpenOptions::new();
        options.read(true).append(true).create(true);
        // A new file is the service user's only: records name paths, which may hold tokens.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(open_error)?;
        // A file system without locks (some network ones) is written unlocked.
        #[cfg(unix)]
        if lock && let Err(std::fs::TryLockError::WouldBlock) = file.try_lock() {
            return Err(AuditError::InUse {
                path: path.to_owned(),
            });
        }
        #[cfg(not(unix))]
        let _ = lock;
        let (prev, needs_newline) = last_audit_hash(&mut file).map_err(open_error)?;
        if needs_newline {
            tracing::warn!(audit_log = %path.display(), "the audit file ends with a partly written line (a crash or a full disk during a write): it stays as it is, and new records follow the last whole one (`bridge audit verify` notes it)");
        }
        let mut log = Self::from_writer(file, prev);
        log.chain
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .needs_newline = needs_newline;
        Ok(log)
    }

    /// The log `target` names; a file locked for this process when `lock` (see
    /// [`AuditLog::open_with`]).
    pub fn for_target(target: &AuditTarget, lock: bool) -> Result<Self, AuditError> {
        match target {
            AuditTarget::Stdout => Ok(Self::stdout()),
            AuditTarget::File(path) => Self::open_with(path, lock),
        }
    }

    /// Writes to `out`, continuing after the line whose hash is `prev` (a new chain if `None`).
    pub fn from_writer(out: impl Write + Send + 'static, prev: Option<String>) -> Self {
        Self {
            chain: Mutex::new(Chain {
                out: Box::new(out),
                prev: prev.unwrap_or_else(|| GENESIS_HASH.to_owned()),
                needs_newline: false,
                pending: Vec::new(),
                deferred: false,
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Chains `record` as one line and writes it: at once, or, once a flusher runs, together
    /// with the other records of the same scheduler tick (one `write` for many requests).
    pub fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut chain = self.chain.lock().unwrap_or_else(PoisonError::into_inner);
        let line = serde_json::to_string(&Line {
            kind: AUDIT_TYPE,
            record,
            prev: &chain.prev,
        })?;
        let was_empty = chain.pending.is_empty();
        if chain.needs_newline {
            chain.pending.push(b'\n');
            chain.needs_newline = false;
        }
        chain.pending.extend_from_slice(line.as_bytes());
        chain.pending.push(b'\n');
        chain.prev = line_hash(line.as_bytes());
        if !chain.deferred {
            return Self::write_pending(&mut chain);
        }
        if was_empty {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Writes the records not yet written (the flusher does this; call it once more at exit).
    pub fn flush(&self) -> Result<(), AuditError> {
        let mut chain = self.chain.lock().unwrap_or_else(PoisonError::into_inner);
        Self::write_pending(&mut chain)
    }

    /// Writes `pending` and drops only what reached the writer: after a failed write (disk
    /// full) the rest stays queued and goes out with the next flush, so the file never holds a
    /// torn line or a gap in the hash chain.
    fn write_pending(chain: &mut Chain) -> Result<(), AuditError> {
        let Chain { out, pending, .. } = chain;
        while !pending.is_empty() {
            match out.write(pending) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out.flush()?)
    }

    /// From now on, records are written by a task that runs after the handlers woken in the
    /// same tick, so a busy bridge makes one `write` for many records instead of one each.
    /// Records wait for microseconds, not for a timer; [`AuditLog::flush`] writes the rest.
    pub fn spawn_flusher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        self.chain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .deferred = true;
        let log = self.clone();
        tokio::spawn(async move {
            loop {
                log.wake.notified().await;
                tokio::task::yield_now().await;
                if let Err(e) = log.flush() {
                    tracing::error!(cause = %e, "cannot write audit records");
                }
            }
        })
    }

    /// The hash of the last audit line written (or found when the file was opened).
    pub fn last_hash(&self) -> String {
        let chain = self.chain.lock().unwrap_or_else(PoisonError::into_inner);
        chain.prev.clone()
    }
}

/// Scans `file` backwards for its last audit line. Returns that line's hash (`None` if there
/// is none) and whether the file ends without a newline.
fn last_audit_hash(file: &mut File) -> io::Result<(Option<String>, bool)> {
    const BLOCK: u64 = 64 * 1024;
    let len = file.seek(SeekFrom::End(0))?;
    let needs_newline = if len == 0 {
        false
    } else {
        let mut last = [0u8];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        last[0] != b'\n'
    };
    // `carry` holds the start of the line cut by the previous block's first byte.
    let mut end = len;
    let mut carry: Vec<u8> = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let mut block = vec![0; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&carry);
        let mut lines: Vec<&[u8]> = block.split(|b| *b == b'\n').collect();
        // Unless at the file's start, the first piece may be the tail of an earlier line.
        let first = if start > 0 { lines.remove(0) } else { &[][..] };
        for line in lines.iter().rev() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if matches!(verify::audit_prev(line), Some(Ok(_))) {
                return Ok((Some(line_hash(line)), needs_newline));
            }
        }
        carry = first.to_vec();
        end = start;
    }
    Ok((None, needs_newline))
}

#[cfg(test)]
mod tests;
