use super::*;

fn success(at: i64) -> Deployment {
    let body = json!({"type": "deployment", "service": "api", "status": "success"});
    Deployment {
        id: format!("d{at}"),
        fields: Fields::of(&body, at),
        commit_at: None,
    }
}

/// Figures over a window whose oldest deployments were left unread say so; a window
/// older or newer than what was left out does not.
#[test]
fn a_window_with_unread_deployments_is_marked_truncated() {
    const DAY: i64 = 86_400_000_000;
    let read: Vec<Deployment> = (10..20).map(|d| success(d * DAY)).collect();
    let none = HashSet::new();
    let window = |since, until, complete_from| {
        answer(&read, &none, (None, None), (since, until), complete_from)["truncated"].clone()
    };
    assert_eq!(window(0, 30 * DAY, 10 * DAY), json!(true));
    assert_eq!(window(12 * DAY, 30 * DAY, 10 * DAY), json!(false));
    assert_eq!(window(0, 30 * DAY, i64::MIN), json!(false));
}

/// A SQLite store in a temporary directory (kept while the directory is), with the org
/// `acme`.
async fn store_with_org() -> (tempfile::TempDir, Store, i64) {
    use crate::storage::{Backend, OpenMode};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &Backend::Sqlite(dir.path().join("signals.db")),
        crate::metrics::Metrics::new(),
        OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    let org = store.create_org("acme").await.unwrap();
    (dir, store, org)
}

/// Stores a successful deployment of `version` of the service `api` in production at `at`.
async fn deploy(store: &Store, org: i64, version: &str, at: i64) -> Result<(), StorageError> {
    use crate::storage::{NewEvent, WriteBatch};
    let (id, seq) = store.new_event_id(org);
    let body = json!({"type": "deployment", "service": "api", "environment": "prod",
        "version": version, "status": "success"});
    store
        .insert(WriteBatch {
            org_id: org,
            signal_key: "k".into(),
            idempotency: None,
            events: vec![NewEvent {
                id,
                seq,
                kind: "deployment",
                service: Some("api".into()),
                environment: Some("prod".into()),
                status: Some("success".into()),
                dedup_key: None,
                occurred_at: at,
                received_at: at,
                body: body.to_string(),
            }],
        })
        .await
        .map(|_| ())
}

/// A window holding exactly as many deployments as are read is complete; one more makes
/// it truncated. Against a real SQLite store.
#[tokio::test]
async fn truncated_only_when_a_deployment_was_left_unread() {
    const DAY: i64 = 86_400_000_000;
    let (_dir, store, org) = store_with_org().await;
    let deploy = |at: i64| deploy(&store, org, "v1", at);
    let window = (0, 30 * DAY);
    for i in 0..PAGE {
        deploy(10 * DAY + i).await.unwrap();
    }
    let (read, _, complete_from) = load_at_most(&store, org, (None, None), window, PAGE)
        .await
        .unwrap();
    assert_eq!(read.len() as i64, PAGE);
    assert_eq!(complete_from, i64::MIN, "every deployment was read");
    deploy(DAY).await.unwrap();
    let (read, none, complete_from) = load_at_most(&store, org, (None, None), window, PAGE)
        .await
        .unwrap();
    assert_eq!(read.len() as i64, PAGE);
    assert_eq!(complete_from, DAY, "the oldest was left unread");
    let truncated = |since| {
        answer(&read, &none, (None, None), (since, 30 * DAY), complete_from)["truncated"].clone()
    };
    assert_eq!(truncated(0), json!(true));
    // A window that begins after the one left unread is whole.
    assert_eq!(truncated(2 * DAY), json!(false));
}

/// Each weekly bar of a service's page says what `GET /v1/dora` says for that week: a
/// rollback to a version older than 30 days before the week is none in either (the bars once
/// read the whole 12 weeks' history and called it one). Against a real SQLite store.
#[tokio::test]
async fn a_weeks_bar_reads_what_the_api_reads_for_that_week() {
    const DAY: i64 = 86_400_000_000;
    let (_dir, store, org) = store_with_org().await;
    let now = crate::storage::now_micros();
    // v1 seventy days ago; v2, then v1 again, in the last hour.
    deploy(&store, org, "v1", now - 70 * DAY).await.unwrap();
    deploy(&store, org, "v2", now - 3_600_000_000)
        .await
        .unwrap();
    deploy(&store, org, "v1", now - 60_000_000).await.unwrap();
    let (bars, whole) = weekly(&store, org, "api", None, 12).await.unwrap();
    let mut failed_weeks = 0;
    for bar in &bars {
        let bound = |key: &str| {
            DateTime::parse_from_rfc3339(bar[key].as_str().unwrap())
                .unwrap()
                .timestamp_micros()
        };
        let window = (bound("since"), bound("until"));
        let (read, confirmed, complete_from) =
            load(&store, org, Some("api"), None, window).await.unwrap();
        let api = answer(
            &read,
            &confirmed,
            (Some("api"), None),
            window,
            complete_from,
        );
        assert_eq!(bar, &api, "the bar of the week from {}", bar["since"]);
        failed_weeks += usize::from(bar["changeFailRate"].as_f64().unwrap_or(0.0) > 0.0);
    }
    assert_eq!(failed_weeks, 0, "{bars:?}");
    // The whole 12 weeks hold the first v1: there v2 was rolled back.
    assert_eq!(whole["changeFailRate"], json!(0.333), "{whole}");
}

/// Only a version that ran counts as brought back, and only by a deployment that went out.
#[test]
fn a_rollback_brings_back_a_version_that_ran_and_goes_out() {
    let deploy = |version: &str, status: &str, at: i64| {
        let body = json!({"type": "deployment", "service": "api", "version": version,
            "status": status});
        Deployment {
            id: format!("{version}-{at}"),
            fields: Fields::of(&body, at),
            commit_at: None,
        }
    };
    let rate = |deployments: &[Deployment]| {
        figures_of(deployments, &HashSet::new(), 0, 100)["changeFailRate"].clone()
    };
    // v1 failed, v2 ran, v1 went out at last: no rollback of v2 (1 failed of 3 finished).
    let retried = [
        deploy("v1", "failure", 1),
        deploy("v2", "success", 2),
        deploy("v1", "success", 3),
    ];
    assert_eq!(rate(&retried), json!(0.333));
    // v1 ran, v2 ran, a cancelled v1: v2 was not rolled back.
    let cancelled = [
        deploy("v1", "success", 1),
        deploy("v2", "success", 2),
        deploy("v1", "cancelled", 3),
    ];
    assert_eq!(rate(&cancelled), json!(0.0));
    // The same with the v1 that went out: v2 was rolled back.
    let rolled = [
        deploy("v1", "success", 1),
        deploy("v2", "success", 2),
        deploy("v1", "cancelled", 3),
        deploy("v1", "success", 4),
    ];
    assert_eq!(rate(&rolled), json!(0.333));
}

/// Rates keep three decimals, or three significant digits when small.
#[test]
fn small_rates_keep_their_digits() {
    assert_eq!(rounded(6.0 / 7.0), 0.857);
    assert_eq!(rounded(1.0 / 1201.0), 0.000833);
    assert_eq!(rounded(6.0 / 21_900.0), 0.000274);
    assert_eq!(rounded(600.5), 600.5);
    assert_eq!(rounded(0.0), 0.0);
}
