//! The suspects of an alert, scored (docs/correlation.md). Pure: given the alert, the
//! deployments and changes around it, when the alert first fired and the alert's service's
//! dependencies, it ranks them the same way every time and says why.
//!
//! score = exp(-Δt / 60 min) × scope × modifiers, clamped to [0, 1]; an explicit link (the
//! alert's `version` or `sha` is the deployment's) scores 1.0 and ranks above every scored one.

use std::collections::HashMap;

use serde_json::Value;

/// How many suspects are returned.
pub const TOP: usize = 5;
/// Candidates are taken from this long before the alert…
pub const BEFORE_MICROS: i64 = 24 * 3_600_000_000;
/// …to this long after it (clocks disagree a little).
pub const AFTER_MICROS: i64 = 2 * 60_000_000;
/// A redeploy of an earlier version up to this long after the alert is its rollback: people
/// roll back minutes to hours after an alert, well after the candidates' window ends.
pub const ROLLBACK_MICROS: i64 = 24 * 3_600_000_000;

/// An event's fields that correlation reads.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    /// deployment, change or alert.
    pub kind: String,
    /// The service.
    pub service: Option<String>,
    /// The environment.
    pub environment: Option<String>,
    /// The repository.
    pub repository: Option<String>,
    /// The version.
    pub version: Option<String>,
    /// The commit.
    pub sha: Option<String>,
    /// The status (canonical words).
    pub status: Option<String>,
    /// An alert's title.
    pub title: Option<String>,
    /// An alert's dedupKey.
    pub dedup_key: Option<String>,
    /// When it happened (µs).
    pub at: i64,
}

impl Fields {
    /// The fields of a stored body.
    pub fn of(body: &Value, at: i64) -> Fields {
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
        Fields {
            kind: text("type").unwrap_or_default(),
            service: text("service"),
            environment: text("environment"),
            repository: text("repository"),
            version: text("version"),
            sha: text("sha"),
            status: text("status"),
            title: text("title"),
            dedup_key: text("dedupKey"),
            at,
        }
    }
}

/// One ranked suspect: which candidate (its index), its score and the reasons.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// Index into the candidates given.
    pub index: usize,
    /// In [0, 1].
    pub score: f64,
    /// Why, in words, strongest first.
    pub reasons: Vec<String>,
    /// An explicit version or sha link.
    pub explicit: bool,
}

fn minutes(micros: i64) -> String {
    let m = micros.abs() as f64 / 60_000_000.0;
    if m < 1.0 {
        format!("{} s", (micros.abs() as f64 / 1_000_000.0).round())
    } else if m < 120.0 {
        format!("{} min", m.round())
    } else {
        format!("{:.1} h", m / 60.0)
    }
}

fn same(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(x), Some(y)) if x == y)
}

/// What scoring one candidate reads besides it: every candidate, the deployments after the
/// candidates' window (rollbacks only), when each version was first deployed, and the
/// repository the alert is taken to be of.
struct Context<'a> {
    all: &'a [Fields],
    /// For each of `all`: another report of a deployment ranked by one report
    /// ([`reported_again`]): neither a suspect nor what supersedes one.
    again: Vec<bool>,
    /// For each of `all`, then of `later`: whether the deployment went out in the end
    /// ([`went_out_in_the_end`]).
    out: [Vec<bool>; 2],
    later: &'a [Fields],
    earliest: Earliest<'a>,
    repository: Option<String>,
}

/// The deployments around an alert that are no suspects but tell a rollback: `later`, those
/// after the candidates' window up to [`ROLLBACK_MICROS`] after the alert (one may bring an
/// earlier version back), and `earlier`, those before the window (the version brought back
/// may have been deployed days before).
#[derive(Debug, Clone, Copy, Default)]
pub struct Around<'a> {
    /// Deployments after the candidates' window.
    pub later: &'a [Fields],
    /// Deployments before the candidates' window.
    pub earlier: &'a [Fields],
}

/// Ranks `candidates` (deployments and changes) as causes of `alert`. `around` holds the
/// deployments outside the candidates' window that tell a rollback. `first_fired` is when an
/// earlier alert with its dedupKey (or service and title) first fired, if one did;
/// `dependencies` are the services the alert's service depends on.
pub fn rank(
    alert: &Fields,
    candidates: &[Fields],
    around: Around<'_>,
    first_fired: Option<i64>,
    dependencies: &[String],
) -> Vec<Suspect> {
    let context = Context {
        all: candidates,
        again: reported_again(alert, candidates),
        out: went_out_in_the_end([candidates, around.later]),
        later: around.later,
        earliest: earliest_versions(candidates.iter().chain(around.earlier)),
        repository: repository_of(alert, candidates),
    };
    let mut suspects: Vec<Suspect> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == "deployment" || c.kind == "change")
        .filter(|(index, _)| !context.again[*index])
        .map(|(index, c)| score(alert, c, &context, first_fired, dependencies, index))
        .collect();
    suspects.sort_by(|a, b| {
        b.explicit
            .cmp(&a.explicit)
            .then(b.score.total_cmp(&a.score))
            .then_with(|| {
                let (ca, cb) = (&candidates[a.index], &candidates[b.index]);
                (alert.at - ca.at).abs().cmp(&(alert.at - cb.at).abs())
            })
            .then(a.index.cmp(&b.index))
    });
    suspects.truncate(TOP);
    suspects
}

/// When each (service, environment, version) was first deployed among the candidates and the
/// earlier deployments given: read once, so that telling a rollback costs one lookup per pair
/// of deployments, not a pass over all of them.
type Earliest<'a> = HashMap<(&'a str, Option<&'a str>, &'a str), i64>;

/// The alert's `repository`; without one, that of its service's newest deployment before it
/// that names one (a monorepo's alert often names only the service).
fn repository_of(alert: &Fields, candidates: &[Fields]) -> Option<String> {
    if alert.repository.is_some() {
        return alert.repository.clone();
    }
    candidates
        .iter()
        .filter(|d| {
            d.kind == "deployment"
                && d.at <= alert.at
                && d.repository.is_some()
                && same(&d.service, &alert.service)
        })
        .max_by_key(|d| d.at)
        .and_then(|d| d.repository.clone())
}

fn earliest_versions<'a>(deployments: impl Iterator<Item = &'a Fields>) -> Earliest<'a> {
    let mut earliest = Earliest::new();
    // A version that only failed never ran, nor one still in progress: bringing it back is no
    // rollback.
    for d in deployments.filter(|d| d.kind == "deployment" && went_out(d) && !unfinished(d)) {
        if let (Some(service), Some(version)) = (&d.service, &d.version) {
            let key = (service.as_str(), d.environment.as_deref(), version.as_str());
            let at = earliest.entry(key).or_insert(d.at);
            *at = (*at).min(d.at);
        }
    }
    earliest
}

/// For each candidate, whether it is another report of a deployment ranked by one report
/// only: its reports share the service, environment and `version` (`pending`, then
/// `in_progress`, then `success`). The deployment is ranked by its latest report before the
/// alert (a finished one first among reports at the same time), or, when it has none, by its
/// latest after it. An unfinished report (`queued`, `pending`, `in_progress`) gives way to that
/// one; so does a report after the alert when the one before it is unfinished (the deployment
/// was under way when the alert fired). A finished report stays: a version that ran, then was
/// deployed again (and failed, or was a rollback after the alert), is two deployments.
fn reported_again<'a>(alert: &Fields, all: &'a [Fields]) -> Vec<bool> {
    type Key<'a> = (&'a str, Option<&'a str>, &'a str);
    let key = |d: &'a Fields| -> Option<Key<'a>> {
        if d.kind != "deployment" {
            return None;
        }
        Some((
            d.service.as_deref()?,
            d.environment.as_deref(),
            d.version.as_deref()?,
        ))
    };
    // Each deployment's representative before the alert, and after it.
    let mut chosen: [HashMap<Key<'_>, usize>; 2] = [HashMap::new(), HashMap::new()];
    for (i, d) in all.iter().enumerate() {
        if let Some(k) = key(d) {
            let rank = |j: usize| (all[j].at, !unfinished(&all[j]));
            let best = chosen[usize::from(d.at > alert.at)].entry(k).or_insert(i);
            if rank(i) > rank(*best) {
                *best = i;
            }
        }
    }
    all.iter()
        .enumerate()
        .map(|(i, c)| {
            let Some(k) = key(c) else {
                return false;
            };
            match (chosen[0].get(&k), c.at > alert.at) {
                (Some(&before), true) => unfinished(&all[before]),
                (Some(&before), false) => before != i && unfinished(c),
                (None, _) => chosen[1]
                    .get(&k)
                    .is_some_and(|&after| after != i && unfinished(c)),
            }
        })
        .collect()
}

/// For each deployment of each list, whether it went out in the end: a finished report by its
/// own status (not `failure`, `error` or `cancelled`), an unfinished one by the next report of
/// its service and environment when that is of the same version (`pending`, then `cancelled`:
/// it did not), else as going out.
fn went_out_in_the_end<const N: usize>(lists: [&[Fields]; N]) -> [Vec<bool>; N] {
    let mut out = lists.map(|list| list.iter().map(went_out).collect::<Vec<bool>>());
    type Pair<'a> = (Option<&'a str>, Option<&'a str>);
    let mut by_pair: HashMap<Pair<'_>, Vec<(usize, usize)>> = HashMap::new();
    for (l, list) in lists.iter().enumerate() {
        for (i, d) in list
            .iter()
            .enumerate()
            .filter(|(_, d)| d.kind == "deployment")
        {
            let pair = (d.service.as_deref(), d.environment.as_deref());
            by_pair.entry(pair).or_default().push((l, i));
        }
    }
    for reports in by_pair.values_mut() {
        reports.sort_by_key(|&(l, i)| (lists[l][i].at, !unfinished(&lists[l][i])));
        for w in (0..reports.len().saturating_sub(1)).rev() {
            let ((l, i), (nl, ni)) = (reports[w], reports[w + 1]);
            let (d, next) = (&lists[l][i], &lists[nl][ni]);
            if unfinished(d) && d.version.is_some() && d.version == next.version {
                out[l][i] = out[nl][ni];
            }
        }
    }
    out
}

/// Whether `c` is a later report of the deployment whose unfinished report `cause` a person
/// confirmed as an alert's cause (confirmed `in_progress`, ranked by its `success`): the same
/// service, environment and `version`, with no other version of that service and environment
/// deployed between them in `all`.
pub fn carries_confirmation(cause: &Fields, c: &Fields, all: &[Fields]) -> bool {
    let pair = |d: &Fields| {
        d.kind == "deployment"
            && same(&d.service, &cause.service)
            && d.environment == cause.environment
    };
    unfinished(cause)
        && pair(c)
        && cause.version.is_some()
        && c.version == cause.version
        && c.at >= cause.at
        && !all
            .iter()
            .any(|o| pair(o) && o.at > cause.at && o.at < c.at && o.version != cause.version)
}

/// A deployment reported as not yet done: `queued`, `pending` or `in_progress`.
fn unfinished(d: &Fields) -> bool {
    matches!(
        d.status.as_deref(),
        Some("queued" | "pending" | "in_progress")
    )
}

/// A deployment that did not go out (it failed or was cancelled) replaces nothing.
fn went_out(d: &Fields) -> bool {
    !matches!(d.status.as_deref(), Some("failure" | "error" | "cancelled"))
}

/// One candidate's score and reasons: an explicit link, or the time decay times every factor
/// that applies (each in [`factors`], with the reason a person reads).
fn score(
    alert: &Fields,
    c: &Fields,
    context: &Context<'_>,
    first_fired: Option<i64>,
    dependencies: &[String],
    index: usize,
) -> Suspect {
    if let Some(reasons) = factors::explicit_link(alert, c) {
        return Suspect {
            index,
            score: 1.0,
            reasons,
            explicit: true,
        };
    }
    let dt = alert.at - c.at;
    let superseded = factors::superseded(alert, c, context);
    let applied = [
        factors::after_the_alert(dt),
        Some(factors::scope(alert, c, context, dependencies)),
        Some(factors::history(c, first_fired)),
        superseded.clone(),
        factors::in_progress(alert, c, superseded.is_none()),
        factors::outcome(c),
        factors::rolled_back(alert, c, context),
    ];
    let mut s = (-(dt.max(0) as f64) / 3_600_000_000.0).exp();
    let mut reasons = vec![format!("{} {} the alert", factors::what(c), when(dt))];
    for (factor, reason) in applied.into_iter().flatten() {
        s *= factor;
        reasons.push(reason);
    }
    Suspect {
        index,
        score: (s.clamp(0.0, 1.0) * 1000.0).round() / 1000.0,
        reasons,
        explicit: false,
    }
}

fn when(dt: i64) -> String {
    if dt >= 0 {
        format!("{} before", minutes(dt))
    } else {
        format!("{} after", minutes(dt))
    }
}

mod factors;
#[cfg(test)]
mod tests;
