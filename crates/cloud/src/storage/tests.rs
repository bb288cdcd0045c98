//! The store's own tests: migrations of older databases (PostgreSQL through `testkit`'s
//! throwaway schemas, SQLite), the serve lock, and redacted database URLs.

use super::*;

/// A batch of one `custom` event of org 1 at `at`.
fn custom_event(id: &str, seq: Option<i64>, at: i64) -> WriteBatch {
    WriteBatch {
        org_id: 1,
        signal_key: "k".into(),
        idempotency: None,
        events: vec![NewEvent {
            id: id.to_string(),
            seq,
            kind: "custom",
            service: None,
            environment: None,
            status: None,
            dedup_key: None,
            occurred_at: at,
            received_at: at,
            body: "{}".into(),
        }],
    }
}

/// The ids of org 1's first ten events, newest first.
async fn listed(store: &Store) -> Vec<String> {
    let page = EventQuery {
        limit: 10,
        ..EventQuery::default()
    };
    let events = store.list_events(1, &page).await.unwrap();
    events.into_iter().map(|e| e.id).collect()
}

/// A PostgreSQL database made by the release before migration 3 upgrades in place: its
/// events stay readable, new ones list with them, and the two indexes have their new shape.
#[tokio::test]
async fn a_postgres_database_from_before_migration_3_is_upgraded_in_place() {
    let schema = testkit::PgSchema::create();
    let old = PgPool::connect(&schema.url).await.unwrap();
    POSTGRES_MIGRATIONS.run_to(2, &old).await.unwrap();
    sqlx::query("INSERT INTO orgs (slug, created_at) VALUES ('acme', 0)")
        .execute(&old)
        .await
        .unwrap();
    let legacy: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    for (i, id) in legacy.iter().enumerate() {
        sqlx::query(
            "INSERT INTO events (id, org_id, signal_key, type, dedup_key, occurred_at, received_at, body) \
             VALUES ($1, 1, 'k', 'alert', 'disk', $2, $2, '{}')",
        )
        .bind(id)
        .bind(i as i64)
        .execute(&old)
        .await
        .unwrap();
    }
    old.close().await;

    let store = Store::open(
        &Backend::Postgres(schema.url.clone()),
        Metrics::new(),
        OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    for id in &legacy {
        let found = store.event(1, id).await.unwrap();
        assert_eq!(found.map(|e| e.id).as_ref(), Some(id));
    }
    let (id, seq) = store.new_event_id(1);
    assert_eq!(
        store.insert(custom_event(&id, seq, 10)).await.unwrap(),
        InsertOutcome::Stored
    );
    let mut newest_first = vec![id];
    newest_first.extend(legacy.iter().rev().cloned());
    assert_eq!(listed(&store).await, newest_first);
    store.close().await;

    let check = PgPool::connect(&schema.url).await.unwrap();
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes \
         WHERE schemaname = current_schema() AND tablename = 'events' ORDER BY indexname",
    )
    .fetch_all(&check)
    .await
    .unwrap();
    let def = |name: &str| {
        indexes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("no index {name}: {indexes:?}"))
    };
    assert!(
        def("events_by_time").ends_with("(org_id, occurred_at, id)"),
        "{indexes:?}"
    );
    assert!(
        def("events_by_dedup").contains("(org_id, dedup_key, occurred_at, id)"),
        "{indexes:?}"
    );
    check.close().await;
}

/// A database made before event ids carried sequence numbers: its events keep their ids
/// and stay readable, and new events (sequence ids) sort with them.
#[tokio::test]
async fn events_stored_before_sequence_ids_are_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signals.db");
    let old = SqlitePool::connect_with(
        SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true),
    )
    .await
    .unwrap();
    SQLITE_MIGRATIONS.run_to(2, &old).await.unwrap();
    sqlx::query("INSERT INTO orgs (slug, created_at) VALUES ('acme', 0)")
        .execute(&old)
        .await
        .unwrap();
    let legacy: Vec<String> = (0..3).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    for (i, id) in legacy.iter().enumerate() {
        sqlx::query(
            "INSERT INTO events (id, org_id, signal_key, type, occurred_at, received_at, body) \
             VALUES ($1, 1, 'k', 'custom', $2, $2, '{}')",
        )
        .bind(id)
        .bind(i as i64)
        .execute(&old)
        .await
        .unwrap();
    }
    old.close().await;

    let store = Store::open(
        &Backend::Sqlite(path),
        Metrics::new(),
        OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    for id in &legacy {
        let found = store.event(1, id).await.unwrap();
        assert_eq!(found.map(|e| e.id).as_ref(), Some(id));
    }
    assert!(
        store.event(2, &legacy[0]).await.unwrap().is_none(),
        "org scoped"
    );
    let (id, seq) = store.new_event_id(1);
    assert_eq!(seq, Some(4), "numbers continue after the migrated rows");
    assert_eq!(
        store.insert(custom_event(&id, seq, 10)).await.unwrap(),
        InsertOutcome::Stored
    );
    assert_eq!(
        store.event(1, &id).await.unwrap().map(|e| e.id),
        Some(id.clone())
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    assert!(store.event(1, &unknown).await.unwrap().is_none());
    let mut newest_first = vec![id];
    newest_first.extend(legacy.iter().rev().cloned());
    assert_eq!(listed(&store).await, newest_first);
    store.close().await;
}

#[test]
fn a_second_server_on_one_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite(dir.path().join("signals.db"));
    let first = ServeLock::acquire(&backend).unwrap();
    let second = ServeLock::acquire(&backend).unwrap_err();
    assert!(matches!(second, StorageError::InUse(_)), "{second}");
    assert!(second.to_string().contains("--data-dir"), "{second}");
    drop(first);
    ServeLock::acquire(&backend).expect("free once the first server is gone");
    let postgres = Backend::Postgres("postgres://localhost/x".into());
    let _a = ServeLock::acquire(&postgres).unwrap();
    let _b = ServeLock::acquire(&postgres).expect("PostgreSQL may be shared");
}

#[test]
fn database_passwords_never_show() {
    let url = "postgres://app:s3cret@db:5432/signals?sslmode=require&password=s3cret";
    let shown = format!("{:?}", Backend::Postgres(url.into()));
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("app@db:5432/signals"), "{shown}");
    assert!(shown.contains("sslmode=require"), "{shown}");
}

/// A session opens only while the password hash it was vouched by is still the user's: a
/// sign-in that raced a password change opens none.
#[tokio::test]
async fn a_session_needs_the_password_it_was_vouched_by() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &Backend::Sqlite(dir.path().join("signals.db")),
        Metrics::new(),
        OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    let org = store.create_org("acme").await.unwrap();
    let user = store
        .create_user(org, "ada@example.com", Role::Admin)
        .await
        .unwrap();
    store
        .create_password_link(user, b"link", i64::MAX)
        .await
        .unwrap();
    store.use_password_link(b"link", "hash-new").await.unwrap();
    let old = store.create_session(b"s1", user, "c", "hash-old").await;
    assert!(!old.unwrap(), "a session vouched by the old password");
    assert!(store.session(b"s1").await.unwrap().is_none());
    let new = store.create_session(b"s2", user, "c", "hash-new").await;
    assert!(new.unwrap());
    store.close().await;
}

/// An `Idempotency-Key`'s first answer is kept for a day, then deleted: a repeat after that is
/// a new request; younger keys stay.
#[tokio::test]
async fn old_idempotency_keys_are_deleted() {
    for backend in [None, Some(testkit::PgSchema::create())] {
        let dir = tempfile::tempdir().unwrap();
        let target = match &backend {
            Some(schema) => Backend::Postgres(schema.url.clone()),
            None => Backend::Sqlite(dir.path().join("signals.db")),
        };
        let store = Store::open(&target, Metrics::new(), OpenMode::CreateIfMissing)
            .await
            .unwrap();
        on_writer!(&store.db, pool => sqlx::query("INSERT INTO orgs (slug, created_at) VALUES ('acme', 0)")
            .execute(pool)
            .await
            .map(drop)
            .unwrap());
        let now = now_micros();
        for (key, at) in [
            ("old", now - 25 * 3_600_000_000),
            ("young", now - 3_600_000_000),
        ] {
            let mut batch = custom_event(&uuid::Uuid::now_v7().to_string(), None, at);
            batch.idempotency = Some((key.to_string(), format!("{{\"{key}\":1}}")));
            store.insert(batch).await.unwrap();
            on_writer!(&store.db, pool => sqlx::query("UPDATE idempotency SET created_at = $1 WHERE idem_key = $2")
                .bind(at)
                .bind(key)
                .execute(pool)
                .await
                .map(drop)
                .unwrap());
        }
        let before = now - housekeeping::IDEMPOTENCY_KEPT.as_micros() as i64;
        assert_eq!(store.prune_idempotency(before).await.unwrap(), 1);
        assert_eq!(store.idempotent_response("k", "old").await.unwrap(), None);
        assert!(
            store
                .idempotent_response("k", "young")
                .await
                .unwrap()
                .is_some()
        );
        store.close().await;
    }
}
