//! The SQLite group-commit writer: one OS thread that owns one connection and runs each group
//! as one transaction with cached prepared statements. Synchronous on purpose: through an async
//! driver every statement is a round trip to a worker thread, and on a busy 2-core machine
//! those hops, not SQLite, set the commit latency (docs/benchmarks.md has the numbers).

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::mpsc;

use super::group::{InsertOutcome, Job, answer, group};
use super::now_micros;
use crate::metrics::Metrics;

/// Most events one SQLite group takes; more wait for the next group. Large groups amortise
/// the commit's page writes and fsync.
const SQLITE_GROUP_EVENTS: usize = 2_500;
const INSERT_EVENT: &str = "INSERT INTO events (seq, id, org_id, signal_key, type, service, \
    environment, status, dedup_key, occurred_at, received_at, body) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
const INSERT_IDEMPOTENCY: &str = "INSERT INTO idempotency (signal_key, idem_key, response, \
    created_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING";
/// Keeps `deploy_heads` (the newest deployment per service and environment) current.
const UPSERT_HEAD: &str = "INSERT INTO deploy_heads (org_id, service, environment, occurred_at, \
    event_id) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (org_id, service, environment) DO UPDATE \
    SET occurred_at = excluded.occurred_at, event_id = excluded.event_id \
    WHERE excluded.occurred_at > deploy_heads.occurred_at \
    OR (excluded.occurred_at = deploy_heads.occurred_at AND excluded.event_id > deploy_heads.event_id)";
const FIRST_ANSWER: &str =
    "SELECT response FROM idempotency WHERE signal_key = ?1 AND idem_key = ?2";

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // 16 MiB of page cache and a checkpoint every ~40 MB of WAL: the hot index pages stay in
    // memory and are copied to the database file far less often than with the defaults.
    conn.pragma_update(None, "cache_size", -16_384)?;
    conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
}

/// How often the checkpoint thread copies committed WAL frames into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Copies committed WAL frames into the database file on its own thread and connection
/// (a passive checkpoint never blocks the writer), so that the writer's own automatic
/// checkpoint, when the WAL reaches `wal_autocheckpoint`, finds almost nothing left to copy:
/// a group commit never stalls for a whole checkpoint (docs/benchmarks.md has the tail latency).
/// Returns when `stop` is dropped.
fn checkpoint_loop(path: &Path, stop: &std::sync::mpsc::Receiver<()>) {
    let Ok(conn) = open(path) else {
        return;
    };
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY)
    {
        let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        if let Err(e) = done {
            tracing::debug!(cause = %e, "background checkpoint skipped");
        }
    }
}

/// Runs until every sender is gone and the queue is empty.
pub(super) fn run(path: &Path, mut rx: mpsc::Receiver<Job>, metrics: Metrics) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let checkpointer = {
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&path, &stopped))
            .ok()
    };
    write_loop(path, &mut rx, &metrics);
    drop(stop);
    if let Some(thread) = checkpointer {
        let _ = thread.join();
    }
}

fn write_loop(path: &Path, rx: &mut mpsc::Receiver<Job>, metrics: &Metrics) {
    let mut conn = match open(path) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(cause = %e, file = %path.display(), "cannot open the SQLite writer connection");
            None
        }
    };
    while let Some(first) = rx.blocking_recv() {
        let jobs = group(first, rx, SQLITE_GROUP_EVENTS);
        if conn.is_none() {
            conn = open(path).ok();
        }
        let started = Instant::now();
        let result = match conn.as_mut() {
            Some(c) => commit(c, &jobs),
            None => Err(rusqlite::Error::InvalidPath(path.to_path_buf())),
        };
        metrics.observe_commit(started.elapsed(), jobs.len());
        if result.is_err()
            && let Some(c) = conn.as_ref()
        {
            // Prepared statements may refer to a changed schema; start clean next time.
            c.flush_prepared_statement_cache();
        }
        answer(jobs, result.map_err(|e| e.to_string()));
    }
}

fn commit(conn: &mut Connection, jobs: &[Job]) -> rusqlite::Result<Vec<InsertOutcome>> {
    let tx = conn.transaction()?;
    let mut fresh = vec![true; jobs.len()];
    let mut heads = super::group::Heads::default();
    let mut hours = super::change_hours::Hours::default();
    {
        let mut insert = tx.prepare_cached(INSERT_EVENT)?;
        let mut idempotency = tx.prepare_cached(INSERT_IDEMPOTENCY)?;
        for (i, job) in jobs.iter().enumerate() {
            let b = &job.batch;
            if let Some((key, response)) = &b.idempotency {
                fresh[i] =
                    idempotency.execute(params![b.signal_key, key, response, now_micros()])? == 1;
                if !fresh[i] {
                    continue;
                }
            }
            for e in &b.events {
                heads.offer(b.org_id, e);
                if let Some(seq) = e.seq {
                    hours.offer(b.org_id, e, super::change_hours::Key::Seq(seq));
                }
                insert.execute(params![
                    e.seq,
                    e.id,
                    b.org_id,
                    b.signal_key,
                    e.kind,
                    e.service,
                    e.environment,
                    e.status,
                    e.dedup_key,
                    e.occurred_at,
                    e.received_at,
                    e.body
                ])?;
            }
        }
        let mut upsert = tx.prepare_cached(UPSERT_HEAD)?;
        for ((org_id, service, environment), (at, id)) in heads.0 {
            upsert.execute(params![org_id, service, environment, at, id])?;
        }
        let mut add_hour = tx.prepare_cached(super::change_hours::INSERT_SQLITE)?;
        for row in hours.rows() {
            let super::change_hours::Key::Seq(first) = row.first else {
                continue;
            };
            add_hour.execute(params![
                row.org_id,
                row.environment,
                row.hour,
                first,
                row.entries
            ])?;
        }
    }
    // The repeats' first answers, read before the commit: a failure here stores nothing, so
    // no request whose events are stored is answered with an error (and sent again).
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (job, fresh) in jobs.iter().zip(fresh) {
        let first = match (&job.batch.idempotency, fresh) {
            (Some((key, _)), false) => tx
                .prepare_cached(FIRST_ANSWER)?
                .query_row(params![job.batch.signal_key, key], |r| {
                    r.get::<_, String>(0)
                })
                .optional()?,
            _ => None,
        };
        outcomes.push(first.map_or(InsertOutcome::Stored, InsertOutcome::Duplicate));
    }
    tx.commit()?;
    Ok(outcomes)
}
