//! The record of deployments and changes that correlation reads: one row per org,
//! environment, hour of event time and group commit, listing each event's time and key (its
//! sequence number on SQLite, its id on PostgreSQL).
//!
//! Why not an index: an index on events takes one B-tree insert per deployment, which a stream
//! of deployments pays on every event (a tenth of SQLite's ingest, more on PostgreSQL:
//! `docs/benchmarks.md`). The writers instead add one row per (org, environment, hour) a
//! commit touches, usually one for a whole group. Readers decode the hours they need and fetch
//! those events by key.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::records::event_from_row;
use super::{Db, NewEvent, StorageError, StoredEvent, on_db};

/// An hour in µs: the width of one row's time range.
const HOUR_MICROS: i64 = 3_600_000_000;

/// How many hours [`Store::previous_deployment_by_hours`] reads at a time, walking back.
const WALK_HOURS: i64 = 24 * 7;
/// How far back a previous deployment is looked for: a service first deployed in an
/// environment with years of other services' history costs a bounded walk, not all of it.
pub(super) const PREVIOUS_LOOKBACK_HOURS: i64 = 24 * 400;

/// Adds one row per (org, environment, hour) of a commit's deployments and changes (SQLite).
pub(super) const INSERT_SQLITE: &str = "INSERT INTO change_hours (org_id, environment, hour, \
    first_seq, entries) VALUES (?1, ?2, ?3, ?4, ?5)";

fn hour_of(micros: i64) -> i64 {
    micros / HOUR_MICROS
}

/// How an entry names its event: SQLite's sequence number (the rowid) or PostgreSQL's id. One
/// database holds one kind; ids sort like sequence numbers (both grow with arrival).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Key {
    Seq(i64),
    Id(String),
}

/// One row to insert: org, environment, hour, the smallest key (which makes the row's key
/// unique) and the entries as a JSON array of `[occurred_at, key]`.
pub(super) struct HourRow {
    pub org_id: i64,
    pub environment: String,
    pub hour: i64,
    pub first: Key,
    pub entries: String,
}

/// The deployments and changes of one group commit, by (org, environment, hour).
#[derive(Default)]
pub(super) struct Hours(HashMap<(i64, String, i64), Vec<(i64, Key)>>);

impl Hours {
    /// Takes `e` (named by `key`) into account when it is a deployment or change with an
    /// environment.
    pub(super) fn offer(&mut self, org_id: i64, e: &NewEvent, key: Key) {
        let Some(environment) = &e.environment else {
            return;
        };
        if e.kind != "deployment" && e.kind != "change" {
            return;
        }
        self.0
            .entry((org_id, environment.clone(), hour_of(e.occurred_at)))
            .or_default()
            .push((e.occurred_at, key));
    }

    /// The rows to insert.
    pub(super) fn rows(self) -> impl Iterator<Item = HourRow> {
        self.0
            .into_iter()
            .map(|((org_id, environment, hour), entries)| {
                let first = entries.iter().map(|e| &e.1).min().cloned();
                HourRow {
                    org_id,
                    environment,
                    hour,
                    first: first.unwrap_or(Key::Seq(0)),
                    entries: serde_json::to_string(&entries).unwrap_or_default(),
                }
            })
    }
}

impl super::Store {
    /// The `(occurred_at, key)` entries of the org's rows in `environment` for hours in
    /// `[from_hour, to_hour]`.
    async fn hour_entries(
        &self,
        org_id: i64,
        environment: &str,
        (from_hour, to_hour): (i64, i64),
    ) -> Result<Vec<(i64, Key)>, StorageError> {
        // One row back, the rows' arrays joined by commas: a deployment stored alone makes a
        // row of its own, and a day of them is a thousand rows to decode one by one otherwise.
        let sql = match &self.db {
            Db::Sqlite { .. } => {
                "SELECT group_concat(entries, ',') FROM change_hours WHERE org_id = $1 \
                 AND environment = $2 AND hour >= $3 AND hour <= $4"
            }
            Db::Postgres(_) => {
                "SELECT string_agg(entries, ',') FROM change_hours WHERE org_id = $1 \
                 AND environment = $2 AND hour >= $3 AND hour <= $4"
            }
        };
        let joined: Option<String> = on_db!(&self.db, pool => sqlx::query_scalar(sql)
            .bind(org_id)
            .bind(environment)
            .bind(from_hour)
            .bind(to_hour)
            .fetch_one(pool)
            .await?);
        let Some(joined) = joined else {
            return Ok(Vec::new());
        };
        let rows: Vec<Vec<(i64, Key)>> = serde_json::from_str(&format!("[{joined}]"))
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        Ok(rows.into_iter().flatten().collect())
    }

    /// The org's events with these keys, by key; with `service`, only its successful (or
    /// status-less) deployments.
    async fn events_by_key(
        &self,
        org_id: i64,
        keys: &[Key],
        service: Option<&str>,
    ) -> Result<HashMap<Key, StoredEvent>, StorageError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let list = serde_json::to_string(keys).unwrap_or_default();
        let deployments =
            " AND type = 'deployment' AND service = $3 AND (status = 'success' OR status IS NULL)";
        let only = if service.is_some() { deployments } else { "" };
        // SQLite: rowid lookups; `+org_id` keeps the planner off the (org, time) index, which
        // would read every event of the org and test each against the list. PostgreSQL: one
        // scan of the primary key for the whole array (`= ANY`), not a join with the list.
        let sql = match &self.db {
            Db::Sqlite { .. } => format!(
                "SELECT seq, id, occurred_at, received_at, body FROM events \
                 WHERE seq IN (SELECT value FROM json_each($2)) AND +org_id = $1{only}"
            ),
            Db::Postgres(_) => format!(
                "SELECT id, occurred_at, received_at, body FROM events \
                 WHERE id = ANY(ARRAY(SELECT json_array_elements_text($2::json))) \
                 AND org_id = $1{only}"
            ),
        };
        let sqlite = matches!(self.db, Db::Sqlite { .. });
        Ok(on_db!(&self.db, pool => {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(org_id).bind(list);
            if let Some(service) = service {
                query = query.bind(service);
            }
            query
                .fetch_all(pool)
                .await?
                .into_iter()
                .map(|r| {
                    let key = if sqlite {
                        Key::Seq(r.get::<i64, _>("seq"))
                    } else {
                        Key::Id(r.get::<String, _>("id"))
                    };
                    (key, event_from_row(r))
                })
                .collect()
        }))
    }

    /// The org's deployments and changes in `environment` with event times in `[from, to]`
    /// (µs), newest first (ties: the later stored first), at most `limit`.
    pub(super) async fn changes_by_hours(
        &self,
        org_id: i64,
        environment: &str,
        (from, to): (i64, i64),
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let hours = (hour_of(from), hour_of(to));
        let mut found = self.hour_entries(org_id, environment, hours).await?;
        found.retain(|(at, _)| *at >= from && *at <= to);
        found.sort_unstable_by(|a, b| b.cmp(a));
        found.truncate(limit);
        let keys: Vec<Key> = found.into_iter().map(|e| e.1).collect();
        let mut events = self.events_by_key(org_id, &keys, None).await?;
        Ok(keys.iter().filter_map(|k| events.remove(k)).collect())
    }

    /// The org's successful (or status-less) deployments of `service` in `environment` stored
    /// before `(at, id)`, newest first, passed to `take` until it accepts one or `scan` of them
    /// were seen.
    pub(super) async fn previous_deployment_by_hours(
        &self,
        org_id: i64,
        (service, environment): (&str, &str),
        (at, id): (i64, &str),
        scan: usize,
        take: impl Fn(&StoredEvent) -> bool,
    ) -> Result<Option<StoredEvent>, StorageError> {
        let newest_hour = "SELECT max(hour) FROM change_hours WHERE org_id = $1 \
                           AND environment = $2 AND hour <= $3";
        let mut seen = 0;
        let mut upper = hour_of(at);
        let oldest = upper - PREVIOUS_LOOKBACK_HOURS;
        loop {
            if upper < oldest {
                return Ok(None);
            }
            let top: Option<i64> = on_db!(&self.db, pool => sqlx::query_scalar(newest_hour)
                .bind(org_id)
                .bind(environment)
                .bind(upper)
                .fetch_one(pool)
                .await?);
            let Some(top) = top else {
                return Ok(None);
            };
            let lower = (top - WALK_HOURS + 1).max(oldest);
            let mut found = self.hour_entries(org_id, environment, (lower, top)).await?;
            found.retain(|(t, _)| *t <= at);
            found.sort_unstable_by(|a, b| b.cmp(a));
            let keys: Vec<Key> = found.into_iter().map(|e| e.1).collect();
            let mut events = self.events_by_key(org_id, &keys, Some(service)).await?;
            for key in keys {
                let Some(e) = events.remove(&key) else {
                    continue;
                };
                if e.occurred_at == at && e.id.as_str() >= id {
                    continue;
                }
                if take(&e) {
                    return Ok(Some(e));
                }
                seen += 1;
                if seen >= scan {
                    return Ok(None);
                }
            }
            upper = lower - 1;
        }
    }
}

#[cfg(test)]
mod tests;
