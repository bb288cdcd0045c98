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
        loop {
            let top: Option<i64> = on_db!(&self.db, pool => sqlx::query_scalar(newest_hour)
                .bind(org_id)
                .bind(environment)
                .bind(upper)
                .fetch_one(pool)
                .await?);
            let Some(top) = top else {
                return Ok(None);
            };
            let lower = top - WALK_HOURS + 1;
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
mod tests {
    use super::super::WriteBatch;
    use super::super::{Backend, OpenMode, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS, Store};
    use super::*;
    use crate::metrics::Metrics;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

    const DAY: i64 = 24 * HOUR_MICROS;

    fn event(kind: &'static str, env: &str, at: i64, seq: i64) -> NewEvent {
        NewEvent {
            id: format!("e{seq:03}"),
            seq: Some(seq),
            kind,
            service: Some("api".into()),
            environment: Some(env.into()),
            status: Some("success".into()),
            dedup_key: None,
            occurred_at: at,
            received_at: at,
            body: r#"{"sha":"abc","repository":"acme/api"}"#.into(),
        }
    }

    /// Events stored before migration 10, and the two `deploy_heads` rows of that time.
    fn earlier() -> Vec<NewEvent> {
        vec![
            event("deployment", "production", 10 * DAY, 1),
            event("change", "production", 10 * DAY + 2 * HOUR_MICROS, 2),
            event("custom", "production", 10 * DAY + 3 * HOUR_MICROS, 3),
            event("deployment", "staging", 10 * DAY + 3 * HOUR_MICROS, 4),
            event("deployment", "production", 2 * DAY, 5),
        ]
    }
    const EARLIER_SQL: &str = "INSERT INTO events (id, org_id, signal_key, type, service, \
        environment, status, occurred_at, received_at, body) \
        VALUES ($1, 1, 'k', $2, $3, $4, $5, $6, $6, $7)";
    /// SQLite: ids that carry no sequence number are rows from before migration 3 (`legacy`).
    const EARLIER_SQLITE: &str = "INSERT INTO events (id, org_id, signal_key, type, service, \
        environment, status, occurred_at, received_at, body, legacy) \
        VALUES ($1, 1, 'k', $2, $3, $4, $5, $6, $6, $7, 1)";
    const HEADS_SQL: &str = "INSERT INTO deploy_heads (org_id, service, environment, \
        occurred_at, event_id) VALUES (1, 'api', 'production', $1, 'e001'), \
        (1, 'api', 'staging', $2, 'e004')";

    /// After the upgrade: a deployment stored now joins the earlier ones; suspects' candidates
    /// and the previous deployment read both, in order, in their environment and org only;
    /// the services' heads follow the new deployment.
    async fn check_upgraded(store: Store) {
        let (id, seq) = store.new_event_id();
        let mut later = event("deployment", "production", 10 * DAY + HOUR_MICROS, 0);
        (later.id, later.seq) = (id.clone(), seq);
        let batch = WriteBatch {
            org_id: 1,
            signal_key: "k".into(),
            idempotency: None,
            events: vec![later],
        };
        store.insert(batch).await.unwrap();

        let ids = |events: Vec<StoredEvent>| -> Vec<String> {
            events.into_iter().map(|e| e.id).collect()
        };
        let window = (10 * DAY - DAY, 10 * DAY + 4 * HOUR_MICROS);
        let around = store
            .changes_between(1, Some("production"), window.0, window.1)
            .await
            .unwrap();
        assert_eq!(ids(around), ["e002", id.as_str(), "e001"]);
        let other_org = store
            .changes_between(2, Some("production"), window.0, window.1)
            .await
            .unwrap();
        assert!(other_org.is_empty(), "org scoped");

        let previous = |at: i64, id: &str| {
            let store = store.clone();
            let id = id.to_string();
            async move {
                store
                    .previous_deployment(1, ("api", "production", "acme/api"), (at, &id))
                    .await
                    .unwrap()
                    .map(|e| e.id)
            }
        };
        assert_eq!(
            previous(10 * DAY + HOUR_MICROS, &id).await.as_deref(),
            Some("e001")
        );
        assert_eq!(
            previous(10 * DAY, "e001").await.as_deref(),
            Some("e005"),
            "eight days back, past the hours with none"
        );
        assert_eq!(previous(2 * DAY, "e005").await, None);

        let heads = ids(store.last_deployments(1, 10).await.unwrap());
        assert_eq!(
            heads,
            [id.as_str(), "e004"],
            "one head per pair, the newest"
        );
        store.close().await;
    }

    /// Stores the org, [`earlier`] (in order: SQLite numbers them 1 to 5, their `seq`) and
    /// the `deploy_heads` rows of that time, in a database at migration 9.
    async fn store_earlier(db: &Db) {
        let sql = match db {
            Db::Sqlite { .. } => EARLIER_SQLITE,
            Db::Postgres(_) => EARLIER_SQL,
        };
        on_db!(db, pool => {
            sqlx::query("INSERT INTO orgs (slug, created_at) VALUES ('acme', 0)")
                .execute(pool)
                .await
                .unwrap();
            for e in earlier() {
                sqlx::query(sql)
                    .bind(&e.id)
                    .bind(e.kind)
                    .bind(&e.service)
                    .bind(&e.environment)
                    .bind(&e.status)
                    .bind(e.occurred_at)
                    .bind(&e.body)
                    .execute(pool)
                    .await
                    .unwrap();
            }
            sqlx::query(HEADS_SQL)
                .bind(10 * DAY)
                .bind(10 * DAY + 3 * HOUR_MICROS)
                .execute(pool)
                .await
                .unwrap();
            pool.close().await;
        });
    }

    #[tokio::test]
    async fn sqlite_migration_10_lists_earlier_deployments_and_the_writer_adds_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signals.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true);
        let old = SqlitePool::connect_with(options).await.unwrap();
        SQLITE_MIGRATIONS.run_to(9, &old).await.unwrap();
        store_earlier(&Db::Sqlite {
            read: old.clone(),
            write: old,
        })
        .await;
        let backend = Backend::Sqlite(path);
        let store = Store::open(&backend, Metrics::new(), OpenMode::CreateIfMissing).await;
        check_upgraded(store.unwrap()).await;
    }

    #[tokio::test]
    async fn postgres_migrations_10_and_11_list_earlier_deployments_and_keep_one_head_per_pair() {
        let schema = testkit::PgSchema::create();
        let old = sqlx::PgPool::connect(&schema.url).await.unwrap();
        POSTGRES_MIGRATIONS.run_to(9, &old).await.unwrap();
        store_earlier(&Db::Postgres(old)).await;
        let backend = Backend::Postgres(schema.url.clone());
        let store = Store::open(&backend, Metrics::new(), OpenMode::CreateIfMissing).await;
        check_upgraded(store.unwrap()).await;
    }
}
