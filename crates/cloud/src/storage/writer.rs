//! Group commit: requests queue their events; a writer task takes everything queued, stores it
//! in one transaction (one fsync), and only then answers each request.
//!
//! SQLite has a single writer task (it has a single writer lock anyway); PostgreSQL has a few, so
//! one slow commit does not hold back the next group.

use std::sync::Arc;
use std::time::Instant;

use sqlx::QueryBuilder;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Db, NewEvent, StorageError, now_micros};
use crate::metrics::Metrics;

/// Most events one transaction takes; more wait for the next group.
const MAX_GROUP_EVENTS: usize = 10_000;
/// Rows per multi-row `INSERT` (12 parameters each stays under SQLite's 32,766 limit).
const ROWS_PER_STATEMENT: usize = 1_000;
/// Queued batches before `submit` waits (back-pressure instead of unbounded memory).
const QUEUE_DEPTH: usize = 4_096;

/// The events of one request, committed all together or not at all.
#[derive(Debug)]
pub struct WriteBatch {
    /// The org the events belong to.
    pub org_id: i64,
    /// The signal key they were posted to.
    pub signal_key: String,
    /// `Idempotency-Key` and the answer to store with it.
    pub idempotency: Option<(String, String)>,
    /// The events themselves.
    pub events: Vec<NewEvent>,
}

/// What became of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Committed.
    Stored,
    /// Its `Idempotency-Key` had been used: nothing stored; this is the first answer.
    Duplicate(String),
}

struct Job {
    batch: WriteBatch,
    reply: oneshot::Sender<Result<InsertOutcome, StorageError>>,
}

/// The submitting side of the writer.
#[derive(Clone)]
pub(crate) struct WriterHandle {
    tx: Arc<std::sync::Mutex<Option<mpsc::Sender<Job>>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

pub(crate) fn spawn(db: Db, metrics: Metrics) -> WriterHandle {
    let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
    let rx = Arc::new(Mutex::new(rx));
    let writers = match db {
        Db::Sqlite { .. } => 1,
        Db::Postgres(_) => 4,
    };
    let tasks = (0..writers)
        .map(|_| tokio::spawn(run(db.clone(), rx.clone(), metrics.clone())))
        .collect();
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

async fn run(db: Db, rx: Arc<Mutex<mpsc::Receiver<Job>>>, metrics: Metrics) {
    loop {
        let jobs = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut count = first.batch.events.len();
            let mut jobs = vec![first];
            while count < MAX_GROUP_EVENTS {
                match rx.try_recv() {
                    Ok(job) => {
                        count += job.batch.events.len();
                        jobs.push(job);
                    }
                    Err(_) => break,
                }
            }
            jobs
        };
        let started = Instant::now();
        let result = commit(&db, &jobs).await;
        metrics.observe_commit(started.elapsed(), jobs.len());
        match result {
            Ok(outcomes) => {
                for (job, outcome) in jobs.into_iter().zip(outcomes) {
                    let _ = job.reply.send(Ok(outcome));
                }
            }
            Err(err) => {
                tracing::error!(cause = %err, batches = jobs.len(), "group commit failed");
                let message = err.to_string();
                for job in jobs {
                    let _ = job
                        .reply
                        .send(Err(StorageError::Query(sqlx::Error::Protocol(
                            message.clone(),
                        ))));
                }
            }
        }
    }
}

/// Inserts every job's events in one transaction. A job whose idempotency key is taken stores
/// nothing and learns the first answer after the commit.
async fn commit(db: &Db, jobs: &[Job]) -> Result<Vec<InsertOutcome>, StorageError> {
    macro_rules! commit_on {
        ($pool:expr) => {{
            let mut tx = $pool.begin().await?;
            let mut fresh = vec![true; jobs.len()];
            for (i, job) in jobs.iter().enumerate() {
                if let Some((key, response)) = &job.batch.idempotency {
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
            }
            let rows: Vec<(&Job, &NewEvent)> = jobs
                .iter()
                .zip(&fresh)
                .filter(|(_, fresh)| **fresh)
                .flat_map(|(job, _)| job.batch.events.iter().map(move |e| (job, e)))
                .collect();
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO events (id, org_id, signal_key, type, service, environment, \
                     status, dedup_key, occurred_at, received_at, body) ",
                );
                insert.push_values(chunk, |mut row, (job, e)| {
                    row.push_bind(&e.id)
                        .push_bind(job.batch.org_id)
                        .push_bind(&job.batch.signal_key)
                        .push_bind(e.kind)
                        .push_bind(&e.service)
                        .push_bind(&e.environment)
                        .push_bind(&e.status)
                        .push_bind(&e.dedup_key)
                        .push_bind(e.occurred_at)
                        .push_bind(e.received_at)
                        .push_bind(&e.body);
                });
                insert.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            let mut outcomes = Vec::with_capacity(jobs.len());
            for (job, fresh) in jobs.iter().zip(fresh) {
                if fresh {
                    outcomes.push(InsertOutcome::Stored);
                    continue;
                }
                let (key, _) = job
                    .batch
                    .idempotency
                    .as_ref()
                    .expect("only keyed jobs repeat");
                let first: String = sqlx::query_scalar(
                    "SELECT response FROM idempotency WHERE signal_key = $1 AND idem_key = $2",
                )
                .bind(&job.batch.signal_key)
                .bind(key)
                .fetch_one($pool)
                .await?;
                outcomes.push(InsertOutcome::Duplicate(first));
            }
            Ok(outcomes)
        }};
    }
    match db {
        Db::Sqlite { write, .. } => commit_on!(write),
        Db::Postgres(pool) => commit_on!(pool),
    }
}
