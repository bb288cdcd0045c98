//! `bridge audit verify FILE`: checks the hash chain of the audit records in a file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{AUDIT_TYPE, GENESIS_HASH, line_hash};

/// What a successful verification found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifySummary {
    /// Audit records checked.
    pub records: u64,
    /// Chains found: each record whose `prev` is all zeros starts one (a new file, or a
    /// restart of a bridge that writes to stdout).
    pub chains: u64,
    /// Records cut short by a crash or a full disk that nothing chains to: the record after
    /// each follows the whole record before it (the writer went on from there), so none was
    /// removed or altered.
    pub torn: u64,
    /// The line of the first of them.
    pub first_torn: Option<u64>,
}

/// Why a record breaks the chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainBreak {
    /// The line mentions `"type":"audit"` but is not valid JSON.
    #[error("audit record is not valid JSON: it was altered or cut short")]
    Malformed,
    /// The record has no `prev`, or it is not 64 hex digits.
    #[error("audit record has no valid \"prev\" hash: it was altered")]
    BadPrev,
    /// The file's first record does not start a chain.
    #[error(
        "the first audit record does not start a chain (its prev is not all zeros): earlier records were removed"
    )]
    NotFirst,
    /// `prev` is the hash of a record that comes later in the file.
    #[error(
        "records are out of order: this record follows the one on line {follows}, which comes later"
    )]
    Reordered {
        /// The line of the record this one should follow.
        follows: u64,
    },
    /// `prev` is the hash of an earlier record, but not of the one just before.
    #[error(
        "this record follows the one on line {follows}, not the one on line {previous}: records were inserted, duplicated or moved"
    )]
    Skipped {
        /// The line of the record this one should follow.
        follows: u64,
        /// The line of the audit record just before it.
        previous: u64,
    },
    /// `prev` matches no record in the file.
    #[error(
        "prev does not match the audit record on line {previous}: that record was altered, or records after it were removed"
    )]
    Mismatch {
        /// The line of the audit record just before it.
        previous: u64,
    },
}

/// Why verification failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The chain is broken; `line` is the first bad line (1-based, counting every line).
    #[error("line {line}: {reason}")]
    Broken {
        /// The first bad line.
        line: u64,
        /// What is wrong with it.
        reason: ChainBreak,
    },
}

/// Checks the audit chain in the file at `path`.
pub fn verify(path: &Path) -> Result<VerifySummary, VerifyError> {
    let read_error = |source| VerifyError::Read {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(read_error)?;
    verify_reader(file).map_err(|err| match err {
        VerifyError::Read { source, .. } => read_error(source),
        broken => broken,
    })
}

/// What [`anchors`] found.
#[derive(Debug, Default)]
pub struct Anchors {
    /// The SHA-256 of the file's last audit record, for an operator to keep elsewhere.
    pub last: Option<String>,
    /// The line and SHA-256 of each chain's last record, in file order (an anchor vouches for
    /// its own chain only: one per chain is kept).
    pub chain_ends: Vec<(u64, String)>,
    /// The line of the record whose hash is the anchor asked for, and the line where that
    /// record's chain starts.
    pub anchored: Option<(u64, u64)>,
}

/// Where the chain of the file at `path` can be anchored: the SHA-256 of its last audit
/// record, and the record whose hash is `anchor` (one kept from an earlier run), if one still
/// has it. A chain proves only what precedes its last record; a record found by its anchor
/// proves that it, and every record of its chain before it, is still there unaltered (a
/// record with an all-zero `prev` starts a chain, so earlier chains are not covered).
pub fn anchors(path: &Path, anchor: Option<&str>) -> Result<Anchors, VerifyError> {
    let read_error = |source| VerifyError::Read {
        path: path.to_owned(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(read_error)?);
    let mut found = Anchors::default();
    let mut chain_start = 0;
    let mut last_line = 0;
    for_each_line(&mut reader, |number, line| {
        if let Some(prev) = audit_prev(line) {
            if prev.as_deref().is_ok_and(|p| p == GENESIS_HASH) {
                chain_start = number;
                if let Some(hash) = found.last.take() {
                    found.chain_ends.push((last_line, hash));
                }
            }
            let hash = line_hash(line);
            if anchor == Some(hash.as_str()) {
                found.anchored = Some((number, chain_start));
            }
            found.last = Some(hash);
            last_line = number;
        }
        true
    })
    .map_err(read_error)?;
    if let Some(hash) = &found.last {
        found.chain_ends.push((last_line, hash.clone()));
    }
    Ok(found)
}

/// Checks the audit chain in `input` (any mix of log lines and audit lines). Reads it once,
/// and a second time only to explain a break.
pub fn verify_reader<R: Read + Seek>(input: R) -> Result<VerifySummary, VerifyError> {
    let read_error = |source| VerifyError::Read {
        path: PathBuf::new(),
        source,
    };
    let mut reader = BufReader::new(input);
    let mut summary = VerifySummary::default();
    // The line number and hash of the last audit record seen.
    let mut previous: Option<(u64, String)> = None;
    let mut broken = None;
    // A record cut short, until the next record shows whether the chain went on past it.
    let mut torn: Option<u64> = None;
    for_each_line(&mut reader, |number, line| {
        let Some(prev) = audit_prev(line) else {
            return true;
        };
        let prev = match prev {
            Ok(prev) => prev,
            Err(ChainBreak::Malformed) if torn.is_none() => {
                torn = Some(number);
                return true;
            }
            Err(reason) => {
                broken = Some((torn.unwrap_or(number), reason, None));
                return false;
            }
        };
        let expected = previous.as_ref().map_or(GENESIS_HASH, |(_, hash)| hash);
        if let Some(line) = torn.take() {
            // The writer went on from the last whole record (the cut line was never chained),
            // or a restarted bridge began a new chain after a crash cut its last line.
            if prev != expected && prev != GENESIS_HASH {
                broken = Some((line, ChainBreak::Malformed, None));
                return false;
            }
            summary.first_torn.get_or_insert(line);
            summary.torn += 1;
        }
        if prev == expected || prev == GENESIS_HASH {
            summary.records += 1;
            summary.chains += u64::from(prev == GENESIS_HASH);
            previous = Some((number, line_hash(line)));
            true
        } else {
            broken = Some((number, ChainBreak::NotFirst, Some(prev)));
            false
        }
    })
    .map_err(read_error)?;
    // The last record cut short, with nothing after it: a crash during the last write, or
    // an edit; only an anchor kept elsewhere tells them apart.
    if let (Some(line), None) = (torn, &broken) {
        broken = Some((line, ChainBreak::Malformed, None));
    }

    let Some((line, reason, prev)) = broken else {
        return Ok(summary);
    };
    let Some(prev) = prev else {
        return Err(VerifyError::Broken { line, reason });
    };
    // Explain the break: find the record whose hash `prev` is.
    reader.seek(SeekFrom::Start(0)).map_err(read_error)?;
    let mut found = None;
    for_each_line(&mut reader, |number, text| {
        if audit_prev(text).is_some() && line_hash(text) == prev {
            found = Some(number);
            return false;
        }
        true
    })
    .map_err(read_error)?;
    let reason = match (found, previous) {
        (Some(follows), _) if follows > line => ChainBreak::Reordered { follows },
        (Some(follows), Some((previous, _))) => ChainBreak::Skipped { follows, previous },
        (None, Some((previous, _))) => ChainBreak::Mismatch { previous },
        (_, None) => ChainBreak::NotFirst,
    };
    Err(VerifyError::Broken { line, reason })
}

/// Calls `visit(line_number, line)` for each line (without `\n` or `\r\n`) until it returns
/// false.
fn for_each_line<R: BufRead>(
    reader: &mut R,
    mut visit: impl FnMut(u64, &[u8]) -> bool,
) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        number += 1;
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !visit(number, line) {
            return Ok(());
        }
    }
}

/// `None` for a line that is not an audit record; else its `prev`, or why it has none.
pub(super) fn audit_prev(line: &[u8]) -> Option<Result<String, ChainBreak>> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "type")]
        kind: Option<serde_json::Value>,
        prev: Option<serde_json::Value>,
    }
    let probe = match serde_json::from_slice::<Probe>(line) {
        Ok(probe) => probe,
        Err(_) => {
            // Not JSON (or not an object): an ordinary line, unless it claims to be audit.
            let claims_audit = line.windows(b"\"audit\"".len()).any(|w| w == b"\"audit\"")
                && line.windows(b"\"type\"".len()).any(|w| w == b"\"type\"");
            return claims_audit.then_some(Err(ChainBreak::Malformed));
        }
    };
    if probe.kind.as_ref().and_then(|k| k.as_str()) != Some(AUDIT_TYPE) {
        return None;
    }
    let prev = probe.prev.as_ref().and_then(|p| p.as_str()).filter(|p| {
        p.len() == 64
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    Some(prev.map(str::to_owned).ok_or(ChainBreak::BadPrev))
}
