//! What both group-commit writers share: a request's batch, what became of it, a queued job,
//! how a group is taken from the queue and answered, and the newest deployment per service
//! and environment that each commit keeps current.

use tokio::sync::{mpsc, oneshot};

use super::{NewEvent, StorageError};

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

pub(super) struct Job {
    pub(super) batch: WriteBatch,
    pub(super) reply: oneshot::Sender<Result<InsertOutcome, StorageError>>,
}

/// Answers every request of a group: its outcome, or the commit's error.
pub(super) fn answer(jobs: Vec<Job>, result: Result<Vec<InsertOutcome>, String>) {
    match result {
        Ok(outcomes) => {
            for (job, outcome) in jobs.into_iter().zip(outcomes) {
                let _ = job.reply.send(Ok(outcome));
            }
        }
        Err(message) => {
            tracing::error!(cause = %message, batches = jobs.len(), "group commit failed");
            for job in jobs {
                let _ = job.reply.send(Err(StorageError::Commit(message.clone())));
            }
        }
    }
}

/// `first` plus whatever else is queued already, up to `max` events: one group.
pub(super) fn group(first: Job, rx: &mut mpsc::Receiver<Job>, max: usize) -> Vec<Job> {
    let mut count = first.batch.events.len();
    let mut jobs = vec![first];
    while count < max {
        match rx.try_recv() {
            Ok(job) => {
                count += job.batch.events.len();
                jobs.push(job);
            }
            Err(_) => break,
        }
    }
    jobs
}

/// The newest deployment of each (org, service, environment) in a group, for `deploy_heads`:
/// one upsert per key per commit rather than one per deployment.
#[derive(Default)]
pub(super) struct Heads(pub(super) std::collections::HashMap<(i64, String, String), (i64, String)>);

impl Heads {
    /// Takes `e` into account when it is a deployment with a service and an environment.
    pub(super) fn offer(&mut self, org_id: i64, e: &NewEvent) {
        let (Some(service), Some(environment)) = (&e.service, &e.environment) else {
            return;
        };
        if e.kind != "deployment" {
            return;
        }
        let newer = (e.occurred_at, e.id.clone());
        self.0
            .entry((org_id, service.clone(), environment.clone()))
            .and_modify(|head| {
                if newer > *head {
                    *head = newer.clone();
                }
            })
            .or_insert(newer);
    }
}
