//! The stored events and the queries that read and write them (idempotent answers included).

use sqlx::Row;

use super::{Arg, Db, StorageError, Store, on_db};

/// One event ready to be inserted.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// UUIDv7, so ids sort by creation time ([`Store::new_event_id`]).
    pub id: String,
    /// On SQLite, the sequence number the id carries: the row's key.
    pub seq: Option<i64>,
    /// Event type (`deployment`, `alert`, `change`, `custom`).
    pub kind: &'static str,
    /// Indexed copies of the body's fields, for filtering.
    pub service: Option<String>,
    /// See `service`.
    pub environment: Option<String>,
    /// See `service`.
    pub status: Option<String>,
    /// Alert deduplication key, for resolves.
    pub dedup_key: Option<String>,
    /// When it happened, µs since the epoch.
    pub occurred_at: i64,
    /// When the service received it, µs since the epoch.
    pub received_at: i64,
    /// The normalised event as JSON text.
    pub body: String,
}

impl StoredEvent {
    /// The event as the API shows it: its body plus `id` and `receivedAt`.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        let mut body: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&self.body)?;
        body.insert("id".into(), self.id.clone().into());
        let received =
            chrono::DateTime::from_timestamp_micros(self.received_at).unwrap_or_default();
        body.insert(
            "receivedAt".into(),
            crate::time::format_millis(received).into(),
        );
        Ok(serde_json::Value::Object(body))
    }
}

/// One event as read back.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// Event id.
    pub id: String,
    /// When it happened, µs since the epoch.
    pub occurred_at: i64,
    /// When it was received, µs since the epoch.
    pub received_at: i64,
    /// The normalised event as JSON text.
    pub body: String,
}

/// Filters of `GET /v1/events`; every one optional.
#[derive(Debug, Default, Clone)]
pub struct EventQuery {
    /// Only this type.
    pub kind: Option<String>,
    /// Only this service.
    pub service: Option<String>,
    /// Only this environment.
    pub environment: Option<String>,
    /// Occurred at or after (µs).
    pub since: Option<i64>,
    /// Occurred before (µs).
    pub until: Option<i64>,
    /// Continue after this (occurred_at, id), exclusive.
    pub after: Option<(i64, String)>,
    /// Page size.
    pub limit: i64,
}

const EVENT_COLUMNS: &str = "id, occurred_at, received_at, body";

pub(super) fn event_from_row<R: Row>(row: R) -> StoredEvent
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    StoredEvent {
        id: row.get("id"),
        occurred_at: row.get("occurred_at"),
        received_at: row.get("received_at"),
        body: row.get("body"),
    }
}

impl Store {
    /// The answer first given to a request with this `Idempotency-Key`, if any.
    pub async fn idempotent_response(
        &self,
        signal_key: &str,
        idem_key: &str,
    ) -> Result<Option<String>, StorageError> {
        let sql = "SELECT response FROM idempotency WHERE signal_key = $1 AND idem_key = $2";
        // Any connection sees the group commit's data once it has answered (WAL).
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(signal_key).bind(idem_key)
            .fetch_optional(pool).await?.map(|r| r.get(0))),
        )
    }

    /// The newest alert of an org with this dedup key (a resolve inherits its fields).
    pub async fn latest_alert(
        &self,
        org_id: i64,
        dedup_key: &str,
    ) -> Result<Option<StoredEvent>, StorageError> {
        let sql = "SELECT id, occurred_at, received_at, body FROM events \
                   WHERE org_id = $1 AND dedup_key = $2 AND type = 'alert' \
                   ORDER BY occurred_at DESC, id DESC LIMIT 1";
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(org_id).bind(dedup_key)
            .fetch_optional(pool).await?.map(event_from_row)),
        )
    }

    /// One event of an org.
    pub async fn event(&self, org_id: i64, id: &str) -> Result<Option<StoredEvent>, StorageError> {
        let row = match &self.db {
            // By the sequence number the id carries, else among the events stored before ids
            // carried one (see storage/ids.rs).
            Db::Sqlite { read, .. } => {
                let sql = "SELECT id, occurred_at, received_at, body FROM events \
                           WHERE seq = $3 AND id = $2 AND org_id = $1 \
                           UNION ALL \
                           SELECT id, occurred_at, received_at, body FROM events \
                           WHERE legacy = 1 AND id = $2 AND org_id = $1 LIMIT 1";
                let seq = super::ids::sequence_of(id).unwrap_or(-1);
                sqlx::query(sql)
                    .bind(org_id)
                    .bind(id)
                    .bind(seq)
                    .fetch_optional(read)
                    .await?
                    .map(event_from_row)
            }
            Db::Postgres(pool) => {
                let sql = "SELECT id, occurred_at, received_at, body FROM events \
                           WHERE org_id = $1 AND id = $2";
                sqlx::query(sql)
                    .bind(org_id)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .map(event_from_row)
            }
        };
        Ok(row)
    }

    /// A page of an org's events, newest first.
    pub async fn list_events<'a>(
        &self,
        org_id: i64,
        q: &'a EventQuery,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let mut sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE org_id = $1");
        let mut binds: Vec<Arg<'_>> = Vec::new();
        let mut push = |sql: &mut String, cond: &str, arg: Arg<'a>| {
            binds.push(arg);
            sql.push_str(&cond.replace('?', &format!("${}", binds.len() + 1)));
        };
        for (column, value) in [
            ("type", &q.kind),
            ("service", &q.service),
            ("environment", &q.environment),
        ] {
            if let Some(v) = value {
                push(&mut sql, &format!(" AND {column} = ?"), Arg::Text(v));
            }
        }
        if let Some(since) = q.since {
            push(&mut sql, " AND occurred_at >= ?", Arg::Int(since));
        }
        if let Some(until) = q.until {
            push(&mut sql, " AND occurred_at < ?", Arg::Int(until));
        }
        if let Some((at, id)) = &q.after {
            // Row-value comparison: strictly older than the last event of the previous page.
            push(&mut sql, " AND (occurred_at, id) < (?", Arg::Int(*at));
            push(&mut sql, ", ?)", Arg::Text(id));
        }
        sql.push_str(&format!(
            " ORDER BY occurred_at DESC, id DESC LIMIT {}",
            q.limit
        ));
        Ok(on_db!(&self.db, pool => {
            // Safe: only fixed column names and `$n` placeholders are formatted in.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone())).bind(org_id);
            for arg in &binds {
                query = match arg {
                    Arg::Text(s) => query.bind(*s),
                    Arg::Int(i) => query.bind(*i),
                    Arg::OptText(s) => query.bind(*s),
                    Arg::Bytes(b) => query.bind(*b),
                };
            }
            query.fetch_all(pool).await?.into_iter().map(event_from_row).collect()
        }))
    }

    /// The newest deployment of each service in each environment (at most `limit`), by service
    /// then environment: from `deploy_heads`, which the writer keeps current, then each event.
    pub async fn last_deployments(
        &self,
        org_id: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        // PostgreSQL keeps a row per writer slot: the newest of a pair's rows is its head.
        let heads = match &self.db {
            super::Db::Sqlite { .. } => {
                "SELECT event_id FROM deploy_heads WHERE org_id = $1 \
                 ORDER BY service, environment LIMIT $2"
            }
            super::Db::Postgres(_) => {
                // By bytes, as SQLite orders, whatever the database's collation.
                "SELECT DISTINCT ON (service COLLATE \"C\", environment COLLATE \"C\") event_id \
                 FROM deploy_heads WHERE org_id = $1 \
                 ORDER BY service COLLATE \"C\", environment COLLATE \"C\", occurred_at DESC, \
                 event_id DESC LIMIT $2"
            }
        };
        let ids: Vec<String> = on_db!(&self.db, pool => sqlx::query_scalar(heads)
            .bind(org_id)
            .bind(limit)
            .fetch_all(pool)
            .await?);
        let mut events = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(e) = self.event(org_id, &id).await? {
                events.push(e);
            }
        }
        Ok(events)
    }
}
