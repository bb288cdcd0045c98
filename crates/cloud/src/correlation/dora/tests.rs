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

/// A window holding exactly as many deployments as are read is complete; one more makes
/// it truncated. Against a real SQLite store.
#[tokio::test]
async fn truncated_only_when_a_deployment_was_left_unread() {
    use crate::storage::{Backend, NewEvent, OpenMode, WriteBatch};
    const DAY: i64 = 86_400_000_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &Backend::Sqlite(dir.path().join("signals.db")),
        crate::metrics::Metrics::new(),
        OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    let org = store.create_org("acme").await.unwrap();
    let deploy = |at: i64| {
        let (id, seq) = store.new_event_id();
        let batch = WriteBatch {
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
                body: json!({"type": "deployment", "service": "api", "status": "success"})
                    .to_string(),
            }],
        };
        store.insert(batch)
    };
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
