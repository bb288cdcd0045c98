//! The factors of a suspect's score, one function each: the multiplier it applies and the
//! reason a person reads, or `None` when it does not apply. docs/correlation.md lists them.

use super::{Context, Fields, minutes, same, unfinished, when};

/// A factor that applies: its multiplier and why.
pub(super) type Factor = (f64, String);

/// "deployed" or "changed", as the reasons say it.
pub(super) fn what(c: &Fields) -> &'static str {
    if c.kind == "deployment" {
        "deployed"
    } else {
        "changed"
    }
}

/// An explicit link's reasons: the alert names the version or commit a deployment of its own
/// service or repository shipped (another service's "1.4.0" is not this one's).
pub(super) fn explicit_link(alert: &Fields, c: &Fields) -> Option<Vec<String>> {
    let deployment = c.kind == "deployment";
    let related = same(&alert.service, &c.service) || same(&alert.repository, &c.repository);
    let version_link = deployment && related && same(&alert.version, &c.version);
    let sha_link = deployment && related && same(&alert.sha, &c.sha);
    if !version_link && !sha_link {
        return None;
    }
    let mut reasons = Vec::new();
    if version_link {
        reasons.push(format!(
            "version {} is the alert's version",
            c.version.as_deref().unwrap_or_default()
        ));
    }
    if sha_link {
        reasons.push(format!(
            "commit {} is the alert's commit",
            c.sha.as_deref().unwrap_or_default()
        ));
    }
    reasons.push(format!("{} {} the alert", what(c), when(alert.at - c.at)));
    Some(reasons)
}

/// A candidate `dt` after the alert (negative): only clock skew would make it the cause.
pub(super) fn after_the_alert(dt: i64) -> Option<Factor> {
    (dt < 0).then(|| {
        (
            0.5,
            "it came after the alert: only clock skew would make it the cause".into(),
        )
    })
}

/// How close the changed service is to the alerting one: the same, a declared dependency, the
/// same repository, or another.
pub(super) fn scope(
    alert: &Fields,
    c: &Fields,
    context: &Context<'_>,
    dependencies: &[String],
) -> Factor {
    let name = c.service.as_deref().unwrap_or("an unnamed service");
    if same(&alert.service, &c.service) {
        (1.0, "same service".into())
    } else if c.service.as_ref().is_some_and(|s| dependencies.contains(s)) {
        let alerting = alert.service.as_deref().unwrap_or("the alert's service");
        (0.6, format!("{alerting} depends on {name}"))
    } else if same(&context.repository, &c.repository) {
        let repository = c.repository.as_deref().unwrap_or_default();
        (0.4, format!("same repository {repository}"))
    } else {
        (0.15, format!("another service ({name})"))
    }
}

/// Whether the alert fired before the candidate too (a noisy alert) or never did.
pub(super) fn history(c: &Fields, first_fired: Option<i64>) -> Factor {
    let noun = if c.kind == "deployment" {
        "deployment"
    } else {
        "change"
    };
    match first_fired {
        Some(first) if first < c.at => (
            0.3,
            format!(
                "this alert fired before the {noun} too ({} earlier)",
                minutes(c.at - first)
            ),
        ),
        _ => (1.5, format!("the alert never fired before the {noun}")),
    }
}

/// A later deployment of the same service and environment that went out before the alert
/// replaced this one's code. A change (a flag, a setting) outlives deployments, so it is never
/// superseded by one. The deployment that came next counts, whatever order the candidates
/// were read in.
pub(super) fn superseded(alert: &Fields, c: &Fields, context: &Context<'_>) -> Option<Factor> {
    if c.kind != "deployment" {
        return None;
    }
    let later = (context.all.iter().zip(&context.again).zip(&context.out[0]))
        .filter(|((o, again), out)| {
            !**again
                && **out
                && o.kind == "deployment"
                && o.at > c.at
                && o.at <= alert.at
                && same(&o.service, &c.service)
                && same(&o.environment, &c.environment)
        })
        .map(|((o, _), _)| o)
        .min_by_key(|o| o.at)?;
    let version = (later.version.as_deref())
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    Some((
        0.5,
        format!("superseded by a later deployment{version} before the alert"),
    ))
}

/// A deployment still in progress at the alert's time (and not superseded).
pub(super) fn in_progress(alert: &Fields, c: &Fields, not_superseded: bool) -> Option<Factor> {
    (c.kind == "deployment" && not_superseded && unfinished(c) && c.at <= alert.at)
        .then(|| (1.3, "in progress at the alert's time".into()))
}

/// A deployment that failed, or was cancelled.
pub(super) fn outcome(c: &Fields) -> Option<Factor> {
    if c.kind != "deployment" {
        return None;
    }
    match c.status.as_deref() {
        Some("failure" | "error") => Some((0.5, "the deployment failed".into())),
        Some("cancelled") => Some((0.3, "the deployment was cancelled".into())),
        _ => None,
    }
}

/// A redeploy of an earlier version after the alert: someone rolled this deployment back. The
/// first rollback after the alert counts, whatever order the events were read in.
pub(super) fn rolled_back(alert: &Fields, c: &Fields, context: &Context<'_>) -> Option<Factor> {
    if c.kind != "deployment" || alert.at < c.at {
        return None;
    }
    let outs = context.out[0].iter().chain(&context.out[1]);
    let brought_back_earlier = |o: &Fields| match (&c.service, &o.version) {
        (Some(service), Some(version)) => context
            .earliest
            .get(&(service.as_str(), c.environment.as_deref(), version.as_str()))
            .is_some_and(|at| *at < c.at),
        _ => false,
    };
    let (rollback, _) = (context.all.iter().chain(context.later).zip(outs))
        .filter(|(o, out)| {
            o.kind == "deployment"
                && o.at > alert.at
                && **out
                && same(&o.service, &c.service)
                && same(&o.environment, &c.environment)
                && o.version != c.version
                && brought_back_earlier(o)
        })
        .min_by_key(|(o, _)| o.at)?;
    Some((
        1.2,
        format!(
            "rolled back to {} {} after the alert",
            rollback.version.as_deref().unwrap_or_default(),
            minutes(rollback.at - alert.at)
        ),
    ))
}
