//! A PostgreSQL schema of its own for each test that runs on PostgreSQL, on the machine's
//! server (or `SIGNALS_TEST_DATABASE_URL`), dropped when the test ends.

/// Default PostgreSQL of the test machine; override with `SIGNALS_TEST_DATABASE_URL`.
pub const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL server the tests use: `SIGNALS_TEST_DATABASE_URL`, or [`DEFAULT_PG`].
pub fn pg_base_url() -> String {
    std::env::var("SIGNALS_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG.to_string())
}

/// A PostgreSQL schema of its own, dropped at the end.
pub struct PgSchema {
    /// The schema's name (`t_…`).
    pub name: String,
    /// A URL whose connections use the schema (`options=-c search_path=…`).
    pub url: String,
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn pg_exec(sql: String) {
    std::thread::spawn(move || {
        block_on(async move {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&pg_base_url())
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL at {} is required for these tests: {e}",
                        pg_base_url()
                    )
                });
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
                .expect("pg exec");
        })
    })
    .join()
    .expect("pg thread");
}

impl PgSchema {
    /// Creates a new schema in the test database.
    pub fn create() -> Self {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        pg_exec(format!("CREATE SCHEMA {name}"));
        let base = pg_base_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
        PgSchema { name, url }
    }

    /// Runs SQL inside this schema.
    pub fn exec(&self, sql: &str) {
        pg_exec(format!("SET search_path TO {}; {sql}", self.name));
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        pg_exec(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}
