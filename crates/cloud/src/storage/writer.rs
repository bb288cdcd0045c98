//! Group commit: requests queue their events; a writer task takes everything queued, stores it
//! in one transaction (one fsync), and only then answers each request.
//!
//! SQLite has a single writer (it has a single writer lock anyway) on a dedicated thread
//! ([`super::sqlite_writer`], synchronous: no async round trip per statement); PostgreSQL has a
//! few async writer tasks, so one slow commit does not hold back the next group.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::change_hours::Key;
use super::group::{Heads, InsertOutcome, Job, WriteBatch, answer, group};
use super::{Db, NewEvent, StorageError, now_micros};
use crate::metrics::Metrics;

/// Most events one PostgreSQL group takes: each group is encoded whole (and the connection's
/// buffers keep that size), so smaller groups bound the memory of a burst of batches.
const POSTGRES_GROUP_EVENTS: usize = 1_000;
/// PostgreSQL writer tasks: two keep a commit in flight while the next group is encoded,
/// without multiplying the memory of in-flight groups.
const POSTGRES_WRITERS: usize = 2;
/// PostgreSQL's `deploy_heads` keeps one row per pair and writer slot, so that writers never
/// wait for each other's row locks; this many slots in all.
const HEAD_SLOTS: i16 = 64;
/// Queued batches before `submit` waits (back-pressure instead of unbounded memory).
const QUEUE_DEPTH: usize = 4_096;

/// The submitting side of the writer.
#[derive(Clone)]
pub(crate) struct WriterHandle {
    tx: Arc<std::sync::Mutex<Option<mpsc::Sender<Job>>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// Starts the writer(s): a thread on the SQLite file `sqlite_file`, or async tasks on `db`.
pub(crate) fn spawn(
    db: Db,
    sqlite_file: Option<std::path::PathBuf>,
    metrics: Metrics,
) -> WriterHandle {
    let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
    let tasks = match sqlite_file {
        Some(path) => {
            // A thread of its own (named, for `top -H`), watched by a task that ends with it.
            let (done, finished) = oneshot::channel::<()>();
            let spawned = std::thread::Builder::new()
                .name("sqlite-writer".into())
                .spawn(move || {
                    super::sqlite_writer::run(&path, rx, metrics);
                    let _ = done.send(());
                });
            if let Err(e) = spawned {
                tracing::error!(cause = %e, "cannot start the SQLite writer thread");
            }
            vec![tokio::spawn(async move {
                let _ = finished.await;
            })]
        }
        None => {
            let rx = Arc::new(Mutex::new(rx));
            // Each writer keeps its own `deploy_heads` rows (its slot); another process on the
            // same database most likely picks other slots.
            let base = rand::random_range(0..HEAD_SLOTS / POSTGRES_WRITERS as i16);
            (0..POSTGRES_WRITERS as i16)
                .map(|i| {
                    let slot = base * POSTGRES_WRITERS as i16 + i;
                    tokio::spawn(run(db.clone(), rx.clone(), metrics.clone(), slot))
                })
                .collect()
        }
    };
    WriterHandle {
        tx: Arc::new(std::sync::Mutex::new(Some(tx))),
        tasks: Arc::new(Mutex::new(tasks)),
    }
}

impl WriterHandle {
    pub(crate) async fn submit(&self, batch: WriteBatch) -> Result<InsertOutcome, StorageError> {
        let tx = self
            .tx
            .lock()
            .map_err(|_| StorageError::WriterGone)?
            .clone()
            .ok_or(StorageError::WriterGone)?;
        let (reply, answer) = oneshot::channel();
        tx.send(Job { batch, reply })
            .await
            .map_err(|_| StorageError::WriterGone)?;
        answer.await.map_err(|_| StorageError::WriterGone)?
    }

    /// Closes the queue and waits until every queued batch is committed.
    pub(crate) async fn shutdown(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        for task in self.tasks.lock().await.drain(..) {
            let _ = task.await;
        }
    }
}

async fn run(db: Db, rx: Arc<Mutex<mpsc::Receiver<Job>>>, metrics: Metrics, slot: i16) {
    loop {
        let jobs = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            group(first, &mut rx, POSTGRES_GROUP_EVENTS)
        };
        let started = Instant::now();
        let result = commit(&db, &jobs, slot).await;
        metrics.observe_commit(started.elapsed(), jobs.len());
        answer(jobs, result.map_err(|e| e.to_string()));
    }
}

/// The PostgreSQL bulk insert: one fixed statement whatever the row count (arrays unnested),
/// so one prepared statement serves every group. In the same statement it keeps the writer's
/// `deploy_heads` rows (slot $17) current from the group's newest deployment per service and
/// environment ($12 to $16), and adds the group's rows of `change_hours` ($18 to $22). A row
/// lock taken here is held until the commit's fsync; with a slot each, two writers never wait
/// for each other (they did with one row per pair).
const INSERT_EVENTS: &str = "WITH inserted AS (INSERT INTO events (id, org_id, signal_key, type, service, \
    environment, status, dedup_key, occurred_at, received_at, body) \
    SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
    $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])), \
    hours AS (INSERT INTO change_hours (org_id, environment, hour, first_id, entries) \
    SELECT * FROM UNNEST($18::bigint[], $19::text[], $20::bigint[], $21::text[], $22::text[])) \
    INSERT INTO deploy_heads (org_id, service, environment, occurred_at, event_id, slot) \
    SELECT h.*, $17::smallint FROM UNNEST($12::bigint[], $13::text[], $14::text[], $15::bigint[], \
    $16::text[]) AS h ON CONFLICT (org_id, service, environment, slot) DO UPDATE \
    SET occurred_at = excluded.occurred_at, event_id = excluded.event_id \
    WHERE excluded.occurred_at > deploy_heads.occurred_at \
    OR (excluded.occurred_at = deploy_heads.occurred_at AND excluded.event_id > deploy_heads.event_id)";

/// Inserts the events of these (job, event) pairs with [`INSERT_EVENTS`]. The arrays borrow
/// the events' strings: a group of 2,500 events is not copied once more before encoding.
async fn insert_events<'e>(
    exec: impl sqlx::PgExecutor<'e>,
    rows: &[(&Job, &NewEvent)],
    slot: i16,
) -> Result<(), StorageError> {
    let text = |f: &dyn for<'a> Fn(&'a Job, &'a NewEvent) -> &'a str| -> Vec<&str> {
        rows.iter().map(|(j, e)| f(j, e)).collect()
    };
    let optional = |f: &dyn for<'a> Fn(&'a NewEvent) -> Option<&'a str>| -> Vec<Option<&str>> {
        rows.iter().map(|(_, e)| f(e)).collect()
    };
    let number = |f: &dyn Fn(&Job, &NewEvent) -> i64| -> Vec<i64> {
        rows.iter().map(|(j, e)| f(j, e)).collect()
    };
    let mut heads = Heads::default();
    let mut hours = super::change_hours::Hours::default();
    for (j, e) in rows {
        heads.offer(j.batch.org_id, e);
        hours.offer(j.batch.org_id, e, Key::Id(e.id.clone()));
    }
    let hours: Vec<_> = hours.rows().collect();
    let first_ids: Vec<&str> = hours
        .iter()
        .map(|h| match &h.first {
            Key::Id(id) => id.as_str(),
            Key::Seq(_) => "",
        })
        .collect();
    // In key order: writers of two processes that share a slot then lock `deploy_heads` rows
    // in the same order, so they wait for each other instead of deadlocking.
    let mut heads: Vec<_> = heads.0.into_iter().collect();
    heads.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    sqlx::query(INSERT_EVENTS)
        .bind(text(&|_, e| &e.id))
        .bind(number(&|j, _| j.batch.org_id))
        .bind(text(&|j, _| &j.batch.signal_key))
        .bind(text(&|_, e| e.kind))
        .bind(optional(&|e| e.service.as_deref()))
        .bind(optional(&|e| e.environment.as_deref()))
        .bind(optional(&|e| e.status.as_deref()))
        .bind(optional(&|e| e.dedup_key.as_deref()))
        .bind(number(&|_, e| e.occurred_at))
        .bind(number(&|_, e| e.received_at))
        .bind(text(&|_, e| &e.body))
        .bind(heads.iter().map(|((o, _, _), _)| *o).collect::<Vec<i64>>())
        .bind(
            heads
                .iter()
                .map(|((_, s, _), _)| s.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(
            heads
                .iter()
                .map(|((_, _, env), _)| env.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(heads.iter().map(|(_, (at, _))| *at).collect::<Vec<i64>>())
        .bind(
            heads
                .iter()
                .map(|(_, (_, id))| id.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(slot)
        .bind(hours.iter().map(|h| h.org_id).collect::<Vec<i64>>())
        .bind(
            hours
                .iter()
                .map(|h| h.environment.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(hours.iter().map(|h| h.hour).collect::<Vec<i64>>())
        .bind(first_ids)
        .bind(
            hours
                .iter()
                .map(|h| h.entries.as_str())
                .collect::<Vec<&str>>(),
        )
        .execute(exec)
        .await?;
    Ok(())
}

/// Inserts every job's events in one transaction (PostgreSQL). A job whose idempotency key is
/// taken stores nothing and learns the first answer, read in the same transaction. Without keys, the group
/// is one statement, atomic on its own, so BEGIN and COMMIT round trips are saved.
async fn commit(db: &Db, jobs: &[Job], slot: i16) -> Result<Vec<InsertOutcome>, StorageError> {
    let Db::Postgres(pool) = db else {
        return Err(StorageError::Commit(
            "the async writer serves PostgreSQL only".into(),
        ));
    };
    let all = |fresh: &[bool]| -> Vec<(&Job, &NewEvent)> {
        jobs.iter()
            .zip(fresh)
            .filter(|(_, fresh)| **fresh)
            .flat_map(|(job, _)| job.batch.events.iter().map(move |e| (job, e)))
            .collect()
    };
    if jobs.iter().all(|j| j.batch.idempotency.is_none()) {
        insert_events(pool, &all(&vec![true; jobs.len()]), slot).await?;
        return Ok(vec![InsertOutcome::Stored; jobs.len()]);
    }
    let mut tx = pool.begin().await?;
    let mut fresh = vec![true; jobs.len()];
    // Keys taken in one order by every writer (the queue's order among equal keys): two
    // groups holding the same two keys in opposite orders would otherwise wait on each other,
    // and PostgreSQL would abort one of them as a deadlock.
    let mut keyed: Vec<(usize, &Job, &String, &String)> = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, job)| {
            let (key, response) = job.batch.idempotency.as_ref()?;
            Some((i, job, key, response))
        })
        .collect();
    keyed.sort_by(|a, b| (&a.1.batch.signal_key, a.2).cmp(&(&b.1.batch.signal_key, b.2)));
    for (i, job, key, response) in keyed {
        let done = sqlx::query(
            "INSERT INTO idempotency (signal_key, idem_key, response, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(&job.batch.signal_key)
        .bind(key)
        .bind(response)
        .bind(now_micros())
        .execute(&mut *tx)
        .await?;
        fresh[i] = done.rows_affected() == 1;
    }
    insert_events(&mut *tx, &all(&fresh), slot).await?;
    // The repeats' first answers, read before the commit: a failure here stores nothing, so
    // no request whose events are stored is answered with an error (and sent again).
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (job, fresh) in jobs.iter().zip(&fresh) {
        match (&job.batch.idempotency, fresh) {
            (Some((key, _)), false) => {
                let first: String = sqlx::query_scalar(
                    "SELECT response FROM idempotency WHERE signal_key = $1 AND idem_key = $2",
                )
                .bind(&job.batch.signal_key)
                .bind(key)
                .fetch_one(&mut *tx)
                .await?;
                outcomes.push(InsertOutcome::Duplicate(first));
            }
            _ => outcomes.push(InsertOutcome::Stored),
        }
    }
    tx.commit().await?;
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Backend, OpenMode, Store};

    fn keyed(key: &str) -> Job {
        let (reply, _) = oneshot::channel();
        Job {
            batch: WriteBatch {
                org_id: 1,
                signal_key: "k".into(),
                idempotency: Some((key.into(), format!("first answer for {key}"))),
                events: Vec::new(),
            },
            reply,
        }
    }

    /// Another writer holds key 1 and goes on to key 2; this group names them the other way
    /// round. Taken in one order, neither waits on the other: both commit.
    #[tokio::test]
    async fn groups_naming_two_keys_in_opposite_orders_do_not_deadlock() {
        let schema = testkit::PgSchema::create();
        let backend = Backend::Postgres(schema.url.clone());
        let _store = Store::open(&backend, Metrics::new(), OpenMode::CreateIfMissing)
            .await
            .unwrap();
        let pool = sqlx::PgPool::connect(&schema.url).await.unwrap();
        let insert = "INSERT INTO idempotency (signal_key, idem_key, response, created_at) \
                      VALUES ('k', $1, 'the other writer', 0)";
        let mut other = pool.begin().await.unwrap();
        sqlx::query(insert)
            .bind("key-1")
            .execute(&mut *other)
            .await
            .unwrap();
        let other_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *other)
            .await
            .unwrap();
        let mine = tokio::spawn({
            let db = Db::Postgres(pool.clone());
            async move { commit(&db, &[keyed("key-2"), keyed("key-1")], 0).await }
        });
        // Until this group waits on the other writer's transaction.
        let waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted \
                       AND locktype = 'transactionid' AND transactionid = \
                       (SELECT backend_xid FROM pg_stat_activity WHERE pid = $1)";
        testkit::wait_until_async("the group waits for the other writer", || async {
            let n: i64 = sqlx::query_scalar(waiting)
                .bind(other_pid)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
            n > 0
        })
        .await;
        sqlx::query(insert)
            .bind("key-2")
            .execute(&mut *other)
            .await
            .expect("the other writer takes its second key (no deadlock)");
        other.commit().await.unwrap();
        let outcomes = mine
            .await
            .unwrap()
            .expect("the group commits (no deadlock)");
        assert_eq!(
            outcomes,
            [
                InsertOutcome::Duplicate("the other writer".into()),
                InsertOutcome::Duplicate("the other writer".into())
            ]
        );
    }
}
