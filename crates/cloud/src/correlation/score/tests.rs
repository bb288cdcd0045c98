use super::*;

const MIN: i64 = 60_000_000;

fn deploy(service: &str, version: &str, at: i64) -> Fields {
    Fields {
        kind: "deployment".into(),
        service: Some(service.into()),
        environment: Some("production".into()),
        version: Some(version.into()),
        status: Some("success".into()),
        at,
        ..Fields::default()
    }
}

/// [`rank`] with no earlier deployments, no earlier firing and no dependencies.
fn rank_alone(a: &Fields, candidates: &[Fields], later: &[Fields]) -> Vec<Suspect> {
    let around = Around {
        later,
        earlier: &[],
    };
    rank(a, candidates, around, None, &[])
}

/// A deployment of `api` in production reported with `status`.
fn reported(version: &str, status: &str, at: i64) -> Fields {
    let mut d = deploy("api", version, at);
    d.status = Some(status.into());
    d
}

fn alert(at: i64) -> Fields {
    Fields {
        kind: "alert".into(),
        service: Some("api".into()),
        environment: Some("production".into()),
        title: Some("Error rate".into()),
        at,
        ..Fields::default()
    }
}

#[test]
fn the_closer_deploy_of_the_same_service_wins_and_says_why() {
    let candidates = [deploy("api", "1.0", 0), deploy("api", "1.1", 50 * MIN)];
    let ranked = rank_alone(&alert(62 * MIN), &candidates, &[]);
    assert_eq!(ranked[0].index, 1);
    assert_eq!(ranked[0].reasons[0], "deployed 12 min before the alert");
    assert!(ranked[0].reasons.contains(&"same service".to_string()));
    assert!(ranked[0].score > 0.9 && ranked[0].score <= 1.0);
    assert!(
        ranked[1]
            .reasons
            .iter()
            .any(|r| r.starts_with("superseded"))
    );
}

#[test]
fn a_version_link_beats_a_closer_deploy() {
    let candidates = [deploy("api", "1.0", 0), deploy("api", "1.1", 55 * MIN)];
    let mut a = alert(60 * MIN);
    a.version = Some("1.0".into());
    let ranked = rank_alone(&a, &candidates, &[]);
    assert_eq!((ranked[0].index, ranked[0].score), (0, 1.0));
    assert_eq!(ranked[0].reasons[0], "version 1.0 is the alert's version");
}

#[test]
fn a_redeploy_of_an_earlier_version_after_the_alert_is_a_rollback() {
    // Within the candidates' window, or later (read apart, as no suspect).
    let rollback = |version: &str, at: i64| {
        let mut candidates = vec![
            deploy("api", "1.0", 0),
            deploy("web", "3.0", 5 * MIN),
            deploy("api", "1.1", 50 * MIN),
        ];
        let mut later = Vec::new();
        if at - 150 * MIN <= AFTER_MICROS {
            candidates.push(deploy("api", version, at));
        } else {
            later.push(deploy("api", version, at));
        }
        let ranked = rank_alone(&alert(150 * MIN), &candidates, &later);
        let top = ranked.iter().find(|s| s.index == 2).unwrap();
        let said = top
            .reasons
            .iter()
            .find(|r| r.starts_with("rolled back"))
            .cloned();
        (said, top.score)
    };
    // 100 min before the alert: a score well under the clamp, so the ×1.2 shows.
    let (said, within) = rollback("1.0", 151 * MIN);
    assert_eq!(
        said.as_deref(),
        Some("rolled back to 1.0 1 min after the alert")
    );
    let (said, hours) = rollback("1.0", 330 * MIN);
    assert_eq!(
        said.as_deref(),
        Some("rolled back to 1.0 3.0 h after the alert")
    );
    assert_eq!(within, hours, "the same ×1.2, however late");
    let (said, plain) = rollback("1.2", 330 * MIN);
    assert_eq!(said, None, "a version never deployed before");
    assert!((within / plain - 1.2).abs() < 0.01, "{within} {plain}");
    assert_eq!(
        rollback("3.0", 151 * MIN).0,
        None,
        "another service's version"
    );
    // Of two rollbacks read newest first, the first one after the alert is named.
    let candidates = [deploy("api", "1.0", 0), deploy("api", "1.1", 50 * MIN)];
    let later = [
        deploy("api", "1.0", 1260 * MIN),
        deploy("api", "1.0", 105 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &later);
    let top = ranked.iter().find(|s| s.index == 1).unwrap();
    assert!(
        top.reasons
            .contains(&"rolled back to 1.0 45 min after the alert".to_string()),
        "{top:?}"
    );
}

#[test]
fn a_rollback_is_to_a_version_of_the_same_environment_deployed_days_before() {
    let rolled_back = |candidates: &[Fields], earlier: &[Fields], a: &Fields| {
        let later = [deploy("api", "1.0", 65 * MIN)];
        let ranked = rank(
            a,
            candidates,
            Around {
                later: &later,
                earlier,
            },
            None,
            &[],
        );
        let suspect = ranked
            .iter()
            .find(|s| s.index == candidates.len() - 1)
            .unwrap();
        suspect.reasons.iter().any(|r| r.starts_with("rolled back"))
    };
    let mut a = alert(60 * MIN);
    // 1.0 went out three days before (read apart from the candidates).
    let earlier = [deploy("api", "1.0", -3 * 1440 * MIN)];
    assert!(rolled_back(&[deploy("api", "1.1", 50 * MIN)], &earlier, &a));
    assert!(!rolled_back(&[deploy("api", "1.1", 50 * MIN)], &[], &a));
    // An alert without an environment has candidates of every environment: staging's
    // 1.0 is no earlier version of production's.
    a.environment = None;
    let mut staging = deploy("api", "1.0", 0);
    staging.environment = Some("staging".into());
    let candidates = [staging, deploy("api", "1.1", 50 * MIN)];
    assert!(!rolled_back(&candidates, &[], &a));
}

#[test]
fn one_deployment_reported_with_each_status_is_one_suspect() {
    let candidates = [
        deploy("api", "1.0", 0),
        reported("2.0", "pending", 46 * MIN),
        reported("2.0", "in_progress", 48 * MIN),
        reported("2.0", "success", 50 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    let indexes: Vec<usize> = ranked.iter().map(|s| s.index).collect();
    assert_eq!(indexes, [3, 0], "{ranked:?}");
    assert!(ranked[1].reasons.iter().any(|r| r.contains("(2.0)")));
}

#[test]
fn a_deployment_reported_in_progress_then_failed_replaces_nothing() {
    let candidates = [
        deploy("api", "1.0", 30 * MIN),
        reported("2.0", "in_progress", 48 * MIN),
        reported("2.0", "failure", 50 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    assert_eq!(ranked.len(), 2, "{ranked:?}");
    let running = ranked.iter().find(|s| s.index == 0).unwrap();
    assert!(
        !running.reasons.iter().any(|r| r.starts_with("superseded")),
        "{running:?}"
    );
    // A version that ran, then was deployed again and failed: two deployments.
    let candidates = [
        reported("2.0", "success", 20 * MIN),
        reported("2.0", "failure", 50 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    assert_eq!(ranked.len(), 2, "{ranked:?}");
}

#[test]
fn reports_at_one_time_or_across_the_alert_are_one_deployment() {
    // In progress and done at the same minute: the finished report is ranked.
    let candidates = [
        deploy("api", "1.0", 0),
        reported("2.0", "in_progress", 40 * MIN),
        reported("2.0", "success", 40 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    let indexes: Vec<usize> = ranked.iter().map(|s| s.index).collect();
    assert_eq!(indexes, [2, 0], "{ranked:?}");
    // In progress at the alert, done a minute after: ranked as in progress.
    let candidates = [
        deploy("api", "1.0", 0),
        reported("2.0", "in_progress", 40 * MIN),
        reported("2.0", "success", 61 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    let indexes: Vec<usize> = ranked.iter().map(|s| s.index).collect();
    assert_eq!(indexes, [1, 0], "{ranked:?}");
    assert!(
        ranked[0]
            .reasons
            .contains(&"in progress at the alert's time".to_string())
    );
}

#[test]
fn a_deployment_reported_only_after_the_alert_is_one_suspect() {
    let candidates = [
        deploy("api", "1.0", 0),
        reported("2.0", "pending", 61 * MIN),
        reported("2.0", "success", 61 * MIN + MIN / 2),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    assert!(ranked.iter().all(|s| s.index != 1), "{ranked:?}");
    let in_progress = "in progress at the alert's time".to_string();
    assert!(ranked.iter().all(|s| !s.reasons.contains(&in_progress)));
}

#[test]
fn only_a_version_that_ran_is_brought_back_and_only_by_one_that_went_out() {
    let rolled_back = |candidates: &[Fields], later: &[Fields]| {
        let ranked = rank_alone(&alert(60 * MIN), candidates, later);
        let suspect = ranked.iter().find(|s| s.index == 1).unwrap();
        suspect.reasons.iter().any(|r| r.starts_with("rolled back"))
    };
    let failed_before = [
        reported("1.0", "failure", 0),
        deploy("api", "2.0", 50 * MIN),
    ];
    assert!(!rolled_back(
        &failed_before,
        &[deploy("api", "1.0", 90 * MIN)]
    ));
    let ran_before = [deploy("api", "1.0", 0), deploy("api", "2.0", 50 * MIN)];
    assert!(!rolled_back(
        &ran_before,
        &[reported("1.0", "cancelled", 90 * MIN)]
    ));
    assert!(rolled_back(&ran_before, &[deploy("api", "1.0", 90 * MIN)]));
    // A rollback reported pending, then cancelled, brought nothing back either.
    let cancelled_later = [
        reported("1.0", "cancelled", 95 * MIN),
        reported("1.0", "pending", 90 * MIN),
    ];
    assert!(!rolled_back(&ran_before, &cancelled_later));
    // Nor is a version reported in progress, then failed, one that ran.
    let failed_in_steps = [
        reported("1.0", "in_progress", 0),
        reported("1.0", "failure", MIN),
        deploy("api", "2.0", 50 * MIN),
    ];
    let later = [deploy("api", "1.0", 90 * MIN)];
    let ranked = rank_alone(&alert(60 * MIN), &failed_in_steps, &later);
    let suspect = ranked.iter().find(|s| s.index == 2).unwrap();
    assert!(
        !suspect.reasons.iter().any(|r| r.starts_with("rolled back")),
        "{suspect:?}"
    );
    // Superseded by the deployment that came next, not the newest.
    let candidates = [
        deploy("api", "1.0", 0),
        deploy("api", "3.0", 40 * MIN),
        deploy("api", "2.0", 20 * MIN),
    ];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    let first = ranked.iter().find(|s| s.index == 0).unwrap();
    assert!(
        first
            .reasons
            .contains(&"superseded by a later deployment (2.0) before the alert".to_string()),
        "{first:?}"
    );
}

#[test]
fn a_confirmation_is_carried_by_the_later_report_of_the_same_deployment_only() {
    let cause = reported("2.0", "in_progress", 40 * MIN);
    let done = reported("2.0", "success", 50 * MIN);
    let earlier = reported("2.0", "success", 0);
    let all = [earlier.clone(), cause.clone(), done.clone()];
    assert!(carries_confirmation(&cause, &done, &all));
    assert!(
        !carries_confirmation(&cause, &earlier, &all),
        "an earlier deployment"
    );
    // Another version between them: the later 2.0 is a redeploy, not the same deployment.
    let between = [cause.clone(), deploy("api", "3.0", 45 * MIN), done.clone()];
    assert!(!carries_confirmation(&cause, &done, &between));
    // A confirmed finished report is matched by its id only.
    let again = reported("2.0", "success", 55 * MIN);
    assert!(!carries_confirmation(&done, &again, &all));
}

#[test]
fn a_failed_or_cancelled_deployment_replaces_nothing() {
    for status in ["failure", "cancelled"] {
        let candidates = [
            deploy("api", "1.0", 30 * MIN),
            reported("2.0", status, 50 * MIN),
        ];
        let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
        let running = ranked.iter().find(|s| s.index == 0).unwrap();
        assert!(
            !running.reasons.iter().any(|r| r.starts_with("superseded")),
            "{status}: {running:?}"
        );
    }
    let candidates = [reported("2.0", "cancelled", 50 * MIN)];
    let ranked = rank_alone(&alert(60 * MIN), &candidates, &[]);
    assert!(
        ranked[0]
            .reasons
            .contains(&"the deployment was cancelled".to_string())
    );
}

#[test]
fn an_alert_without_a_repository_takes_its_services() {
    let mono = |service: &str, at: i64| {
        let mut d = deploy(service, "x", at);
        d.repository = Some("org/mono".into());
        d
    };
    let candidates = [mono("mono-a", 0), mono("mono-b", 50 * MIN)];
    let mut a = alert(60 * MIN);
    a.service = Some("mono-a".into());
    let ranked = rank_alone(&a, &candidates, &[]);
    let b = ranked.iter().find(|s| s.index == 1).unwrap();
    assert!(
        b.reasons.contains(&"same repository org/mono".to_string()),
        "{b:?}"
    );
    // One the alert names wins over its service's.
    a.repository = Some("org/other".into());
    let ranked = rank_alone(&a, &candidates, &[]);
    let b = ranked.iter().find(|s| s.index == 1).unwrap();
    assert!(
        b.reasons.contains(&"another service (mono-b)".to_string()),
        "{b:?}"
    );
}

#[test]
fn scores_stay_in_range_and_rank_deterministically() {
    let candidates: Vec<Fields> = (0..20)
        .map(|i| deploy("api", &format!("v{i}"), i * MIN))
        .collect();
    let a = alert(20 * MIN);
    let first = rank_alone(&a, &candidates, &[]);
    assert_eq!(first, rank_alone(&a, &candidates, &[]));
    assert_eq!(first.len(), TOP);
    assert!(first.iter().all(|s| (0.0..=1.0).contains(&s.score)));
}
