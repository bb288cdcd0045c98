//! The audit chain: written records verify; edits, deletions and swaps are caught.

use std::io::Cursor;

use chrono::{TimeZone, Utc};

use super::*;
use crate::config::ResourceKind;

fn record(n: u64) -> AuditRecord {
    AuditRecord {
        time: Utc.with_ymd_and_hms(2026, 11, 3, 10, 0, 0).unwrap()
            + chrono::Duration::milliseconds(n as i64),
        request_id: format!("req-{n}"),
        org: "acme".into(),
        bridge: "edge".into(),
        instance: "i-1".into(),
        kind: ResourceKind::Git,
        resource: "git.internal".into(),
        method: "GET".into(),
        path: format!("/repo-{n}.git/info/refs?service=git-upload-pack&token=s3cret"),
        status: 200,
        bytes_in: 0,
        bytes_out: 1024 * n,
        duration_ms: 12,
        principal: "key_123".into(),
        decision: Decision::Allowed,
        rule: "default:git-fetch".into(),
        event: None,
        ended: None,
        statement: None,
    }
}

/// Writes `count` records to a new file and returns its lines.
fn written(count: u64) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path).unwrap();
    for n in 0..count {
        log.write(&record(n)).unwrap();
    }
    let lines = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (dir, path, lines)
}

fn check(lines: &[String]) -> Result<VerifySummary, VerifyError> {
    verify_reader(Cursor::new(lines.join("\n") + "\n"))
}

fn broken_at(lines: &[String]) -> (u64, ChainBreak) {
    match check(lines) {
        Err(VerifyError::Broken { line, reason }) => (line, reason),
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

#[test]
fn a_record_is_one_json_line_with_type_and_prev() {
    let (_dir, _path, lines) = written(2);
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["type"], "audit");
    assert_eq!(first["prev"], GENESIS_HASH);
    assert_eq!(first["time"], "2026-11-03T10:00:00.000Z");
    assert_eq!(first["kind"], "git");
    assert_eq!(first["decision"], "allowed");
    assert_eq!(
        first["path"],
        "/repo-0.git/info/refs?service=git-upload-pack&token"
    );
    assert!(!lines[0].contains("s3cret"));
    for key in [
        "request_id",
        "org",
        "bridge",
        "instance",
        "resource",
        "method",
        "status",
        "bytes_in",
        "bytes_out",
        "duration_ms",
        "principal",
        "rule",
    ] {
        assert!(first.get(key).is_some(), "{key} missing");
    }
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second["prev"], line_hash(lines[0].as_bytes()));
}

#[test]
fn query_values_are_stripped() {
    assert_eq!(strip_query_values("/a/b"), "/a/b");
    assert_eq!(strip_query_values("/a?x=1&y&z=3#frag"), "/a?x&*&z");
    assert_eq!(
        strip_query_values("/a?ghp_0123456789abcdef&n%3D=1"),
        "/a?*&*"
    );
    assert_eq!(strip_query_values("/a?"), "/a");
    assert_eq!(
        strip_query_values("/q;jsessionid=SECRET/b;v=1;ghp_token;;?x=1"),
        "/q;jsessionid/b;v;*?x"
    );
    assert_eq!(
        strip_query_values("/a%3Bjsessionid=S1/b%3ftoken=S2"),
        "/a;jsessionid/b?token"
    );
    assert_eq!(strip_query_values("/a#x?y=1"), "/a");
    // Git's services say what the request does, and are kept.
    assert_eq!(
        strip_query_values("/r.git/info/refs?service=git-receive-pack&t=x"),
        "/r.git/info/refs?service=git-receive-pack&t"
    );
    assert_eq!(strip_query_values("/r?service=other"), "/r?service");
}

#[cfg(unix)]
#[test]
fn a_new_audit_file_is_the_users_only() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path, _) = written(1);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_written_chain_verifies() {
    let (_dir, path, _) = written(5);
    assert_eq!(
        verify(&path).unwrap(),
        VerifySummary {
            records: 5,
            chains: 1,
            ..Default::default()
        }
    );
    let empty = tempfile::NamedTempFile::new().unwrap();
    assert_eq!(verify(empty.path()).unwrap(), VerifySummary::default());
}

#[test]
fn reopening_a_file_continues_the_chain() {
    let (_dir, path, lines) = written(3);
    let log = AuditLog::open(&path).unwrap();
    assert_eq!(log.last_hash(), line_hash(lines[2].as_bytes()));
    log.write(&record(3)).unwrap();
    assert_eq!(
        verify(&path).unwrap(),
        VerifySummary {
            records: 4,
            chains: 1,
            ..Default::default()
        }
    );
}

#[test]
fn reopening_after_a_torn_write_starts_a_fresh_line() {
    let (_dir, path, _) = written(2);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"level\":\"info\",\"message\":\"cut sh")
        .unwrap();
    drop(file);
    AuditLog::open(&path).unwrap().write(&record(2)).unwrap();
    assert_eq!(verify(&path).unwrap().records, 3);
}

/// A record cut short by a crash, after which the bridge went on from the last whole record:
/// `verify` notes it and passes. One cut short that a later record chains to (an edit), or the
/// last line cut short (nothing shows the chain went on), still breaks the chain there.
#[test]
fn a_torn_record_that_nothing_chains_to_is_noted_not_failed() {
    let (_dir, path, _) = written(2);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"type\":\"audit\",\"time\":\"2026-11-29T15:0")
        .unwrap();
    drop(file);
    AuditLog::open(&path).unwrap().write(&record(2)).unwrap();
    let summary = verify(&path).unwrap();
    assert_eq!(
        (summary.records, summary.torn, summary.first_torn),
        (3, 1, Some(3))
    );

    // With `audit_log: stdout` (one stream), the bridge restarted after the crash begins a new
    // chain after the cut line: noted too, not failed.
    let (_dir, _path, mut lines) = written(2);
    let (_dir2, _path2, restarted) = written(2);
    lines.push("{\"type\":\"audit\",\"time\":\"2026-11-29T15:0".into());
    lines.extend(restarted);
    let summary = check(&lines).unwrap();
    assert_eq!((summary.records, summary.chains, summary.torn), (4, 2, 1));

    let (_dir, _path, mut lines) = written(3);
    lines[1].truncate(40);
    assert_eq!(broken_at(&lines), (2, ChainBreak::Malformed));
    let (_dir, _path, mut lines) = written(3);
    lines[2].truncate(40);
    assert_eq!(broken_at(&lines), (3, ChainBreak::Malformed));
}

#[test]
fn continuation_finds_the_last_audit_line_across_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.log");
    let log = AuditLog::open(&path).unwrap();
    log.write(&record(0)).unwrap();
    let last = log.last_hash();
    drop(log);
    // More than one 64 KiB block of ordinary log lines after the audit record.
    let noise = "{\"level\":\"info\",\"message\":\"x\"}\n".repeat(5000);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(noise.as_bytes())
        .unwrap();
    assert_eq!(AuditLog::open(&path).unwrap().last_hash(), last);
}

#[test]
fn altering_a_field_is_detected() {
    let (_dir, _path, mut lines) = written(4);
    lines[1] = lines[1].replace("\"status\":200", "\"status\":201");
    assert_eq!(broken_at(&lines), (3, ChainBreak::Mismatch { previous: 2 }));
}

#[test]
fn deleting_a_record_is_detected() {
    let (_dir, _path, mut lines) = written(4);
    lines.remove(2);
    assert_eq!(broken_at(&lines), (3, ChainBreak::Mismatch { previous: 2 }));
    let (_dir, _path, mut lines) = written(3);
    lines.remove(0);
    assert_eq!(broken_at(&lines), (1, ChainBreak::NotFirst));
}

#[test]
fn swapping_two_records_is_detected() {
    let (_dir, _path, mut lines) = written(4);
    lines.swap(1, 2);
    assert_eq!(broken_at(&lines), (2, ChainBreak::Reordered { follows: 3 }));
}

#[test]
fn duplicating_a_record_is_detected() {
    let (_dir, _path, mut lines) = written(3);
    lines.insert(2, lines[1].clone());
    assert_eq!(
        broken_at(&lines),
        (
            3,
            ChainBreak::Skipped {
                follows: 1,
                previous: 2
            }
        )
    );
}

#[test]
fn damaged_audit_lines_are_reported() {
    let (_dir, _path, mut lines) = written(2);
    lines[1].truncate(40);
    assert_eq!(broken_at(&lines), (2, ChainBreak::Malformed));
    let (_dir, _path, mut lines) = written(2);
    lines[0] = lines[0].replace(GENESIS_HASH, "zz");
    assert_eq!(broken_at(&lines), (1, ChainBreak::BadPrev));
}

#[test]
fn ordinary_log_lines_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stdout.log");
    let file = File::create(&path).unwrap();
    let log = AuditLog::from_writer(file.try_clone().unwrap(), None);
    let mut other = file;
    for n in 0..3 {
        writeln!(other, "{{\"timestamp\":\"2026-11-03T10:00:00Z\",\"level\":\"info\",\"message\":\"m{n}\",\"type\":\"log\"}}").unwrap();
        writeln!(other, "plain text, not JSON").unwrap();
        log.write(&record(n)).unwrap();
    }
    let summary = verify(&path).unwrap();
    assert_eq!(
        summary,
        VerifySummary {
            records: 3,
            chains: 1,
            ..Default::default()
        }
    );
    // The error's line numbers count every line, not only audit ones.
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.remove(5); // the second audit record
    let (line, _) = broken_at(&lines);
    assert_eq!(line, 8);
}

#[test]
fn a_restart_on_stdout_starts_a_new_chain() {
    let (_dir, _path, mut lines) = written(2);
    let (_dir2, _path2, more) = written(2);
    lines.extend(more);
    assert_eq!(
        check(&lines).unwrap(),
        VerifySummary {
            records: 4,
            chains: 2,
            ..Default::default()
        }
    );
    // Each chain's end is given, to be kept: an anchor vouches for its own chain only.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.log");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let found = super::verify::anchors(&file, None).unwrap();
    assert_eq!(
        found.chain_ends,
        [
            (2, line_hash(lines[1].as_bytes())),
            (4, line_hash(lines[3].as_bytes()))
        ]
    );
}

#[test]
fn concurrent_writers_keep_one_chain() {
    let (_dir, path, _) = written(0);
    let log = std::sync::Arc::new(AuditLog::open(&path).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for n in 0..25 {
                    log.write(&record(t * 100 + n)).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(verify(&path).unwrap().records, 100);
}

#[test]
fn errors_name_the_line_and_the_cause() {
    let (_dir, _path, mut lines) = written(3);
    lines.remove(1);
    let text = check(&lines).unwrap_err().to_string();
    assert_eq!(
        text,
        "line 2: prev does not match the audit record on line 1: that record was altered, \
         or records after it were removed"
    );
}

/// A writer that fails while `broken` is set, like a full disk, and otherwise appends.
#[derive(Clone, Default)]
struct FlakyDisk {
    bytes: Arc<Mutex<Vec<u8>>>,
    broken: Arc<std::sync::atomic::AtomicBool>,
}

impl Write for FlakyDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::other("disk full"));
        }
        // Half at a time: partial writes must not tear lines either.
        let n = buf.len().div_ceil(2);
        self.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn deferred_records_survive_a_failed_write_and_the_chain_holds() {
    let disk = FlakyDisk::default();
    let log = Arc::new(AuditLog::from_writer(disk.clone(), None));
    let flusher = log.spawn_flusher();
    disk.broken.store(true, std::sync::atomic::Ordering::SeqCst);
    log.write(&record(0)).unwrap();
    log.write(&record(1)).unwrap();
    assert!(log.flush().is_err(), "the disk is full");
    disk.broken
        .store(false, std::sync::atomic::Ordering::SeqCst);
    log.write(&record(2)).unwrap();
    log.flush().unwrap();
    flusher.abort();
    let text = String::from_utf8(disk.bytes.lock().unwrap().clone()).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(check(&lines).unwrap().records, 3);
}
