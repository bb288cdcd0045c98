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
        body: r#"{"sha":"abc1234","repository":"acme/api"}"#.into(),
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
    let (id, seq) = store.new_event_id(1);
    let mut later = event("deployment", "production", 10 * DAY + HOUR_MICROS, 0);
    (later.id, later.seq) = (id.clone(), seq);
    let batch = WriteBatch {
        org_id: 1,
        signal_key: "k".into(),
        idempotency: None,
        events: vec![later],
    };
    store.insert(batch).await.unwrap();

    let ids =
        |events: Vec<StoredEvent>| -> Vec<String> { events.into_iter().map(|e| e.id).collect() };
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

/// The previous deployment is looked for in the 400 days before: the walk over an
/// environment's history ends there, whatever other services deployed in it.
#[tokio::test]
async fn the_previous_deployment_is_looked_for_within_400_days() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("signals.db"));
    let store = Store::open(&backend, Metrics::new(), OpenMode::CreateIfMissing)
        .await
        .unwrap();
    let org = store.create_org("acme").await.unwrap();
    let mut other = event("deployment", "production", 500 * DAY, 3);
    other.service = Some("web".into());
    // A branch name where the commit goes: it cannot start a list of commits.
    let mut branch = event("deployment", "production", 550 * DAY, 4);
    branch.body = r#"{"sha":"main","repository":"acme/api"}"#.into();
    for e in [
        event("deployment", "production", DAY, 1),
        event("deployment", "production", 300 * DAY, 2),
        other,
        branch,
    ] {
        let batch = WriteBatch {
            org_id: org,
            signal_key: "k".into(),
            idempotency: None,
            events: vec![e],
        };
        store.insert(batch).await.unwrap();
    }
    let previous = |at: i64| {
        let store = store.clone();
        async move {
            store
                .previous_deployment(org, ("api", "production", "acme/api"), (at, "e999"))
                .await
                .unwrap()
                .map(|e| e.id)
        }
    };
    assert_eq!(previous(600 * DAY).await.as_deref(), Some("e002"));
    assert_eq!(previous(299 * DAY).await.as_deref(), Some("e001"));
    assert_eq!(previous(702 * DAY).await, None, "402 days after the last");
    store.close().await;
}
