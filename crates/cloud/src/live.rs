//! What the relay knows about connected bridges, as the features that are not the relay need
//! it (the dashboard's Bridge page, the release notifier), and how bridge releases compare.
//! The application implements [`LiveBridges`] over the relay, so neither imports the relay.

use chrono::{DateTime, Utc};

/// A connected instance of a bridge, as the relay knows it.
pub struct LiveInstance {
    /// The bridge's name.
    pub bridge: String,
    /// The instance's id.
    pub id: String,
    /// The bridge release it runs.
    pub version: String,
    /// When its tunnel opened.
    pub connected_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub last_heartbeat: DateTime<Utc>,
    /// Its declared resources: (kind, name).
    pub resources: Vec<(&'static str, String)>,
    /// Its Git sources that announced `repositories` globs: (source, globs). A source not
    /// here reaches every path (or its bridge predates the announcement).
    pub git_repositories: Vec<(String, Vec<String>)>,
}

/// The live tunnels.
pub trait LiveBridges: Send + Sync {
    /// Every connected instance of the org's bridges.
    fn instances(&self, org_id: i64) -> Vec<LiveInstance>;
    /// Closes every tunnel of one bridge now (its token was revoked).
    fn close(&self, org_id: i64, bridge: &str);
}

/// Why a repository mapping to `bridge`'s Git source `source` cannot work, when this process
/// holds the bridge's tunnel and no connected instance declares that source; `None` when one
/// does, or when no instance is connected here (it may be down, or on another process, and a
/// mapping may come before its bridge). Both the API and the dashboard check it, so a typo in a
/// mapping is refused when it is made rather than found at the first commits lookup.
pub fn undeclared_git_source(
    live: &dyn LiveBridges,
    org_id: i64,
    bridge: &str,
    source: &str,
) -> Option<String> {
    let instances: Vec<LiveInstance> = live
        .instances(org_id)
        .into_iter()
        .filter(|i| i.bridge == bridge)
        .collect();
    if instances.is_empty() {
        return None;
    }
    let mut declared: Vec<&str> = instances
        .iter()
        .flat_map(|i| i.resources.iter())
        .filter(|(kind, _)| *kind == tunnel::ResourceKind::Git.as_str())
        .map(|(_, name)| name.as_str())
        .collect();
    if declared.contains(&source) {
        return None;
    }
    declared.sort_unstable();
    declared.dedup();
    let has = if declared.is_empty() {
        "declares no Git sources".to_string()
    } else {
        format!("declares the Git sources {}", declared.join(", "))
    };
    Some(format!(
        "bridge {bridge:?} is connected and {has}, not {source:?}: name one of its sources, or add {source:?} to the bridge's `sources` and restart it"
    ))
}

/// Why a repository mapping's `path` cannot be read through `bridge`'s Git source `source`:
/// every instance connected here that declares the source announced its `repositories` globs,
/// and none admits the path (the bridge would answer 404). `None` when one admits it, when one
/// declares the source without globs (every path), or when none declares it here (see
/// [`undeclared_git_source`]).
pub fn unlisted_repository(
    live: &dyn LiveBridges,
    org_id: i64,
    bridge: &str,
    source: &str,
    path: &str,
) -> Option<String> {
    let mut globs: Vec<String> = Vec::new();
    for instance in live.instances(org_id) {
        let declares = instance.bridge == bridge
            && (instance.resources.iter())
                .any(|(kind, name)| *kind == tunnel::ResourceKind::Git.as_str() && name == source);
        if !declares {
            continue;
        }
        let announced = (instance.git_repositories.into_iter()).find(|(name, _)| name == source);
        match announced {
            None => return None,
            Some((_, theirs)) if tunnel::repositories::listed(&theirs, path) => return None,
            Some((_, theirs)) => globs.extend(theirs),
        }
    }
    if globs.is_empty() {
        return None;
    }
    globs.sort_unstable();
    globs.dedup();
    Some(format!(
        "bridge {bridge:?}'s Git source {source:?} reaches only the repositories {} (its `repositories` in the bridge's config), and {path:?} is none of them: check the path, or add it to that list and restart the bridge",
        globs.join(", ")
    ))
}

/// This cloud's own release: by default also the bridge release it ships.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `major.minor.patch` as numbers, for comparing releases; pre-release suffixes are ignored.
fn numbers(v: &str) -> Vec<u64> {
    v.split(['-', '+'])
        .next()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// Whether a bridge of `version` is older than `release`.
pub fn outdated(version: &str, release: &str) -> bool {
    numbers(version) < numbers(release)
}

/// Checks a `--bridge-release` value: `MAJOR.MINOR.PATCH`, optionally with a suffix.
pub fn parse_release(given: &str) -> Result<String, String> {
    // A tag's `v` (v1.2.3) is no part of the number the bridges report.
    let v = given.strip_prefix(['v', 'V']).unwrap_or(given);
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.parse::<u64>().is_ok())
    {
        Ok(v.to_string())
    } else {
        Err(format!(
            "{given:?} is not a release number: expected MAJOR.MINOR.PATCH, such as {VERSION}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_s_v_is_dropped_and_other_words_refused() {
        assert_eq!(parse_release("v1.2.3").unwrap(), "1.2.3");
        assert_eq!(parse_release("1.2.3-rc.1").unwrap(), "1.2.3-rc.1");
        assert!(
            parse_release("banana")
                .unwrap_err()
                .contains("\"banana\" is not a release")
        );
        assert!(parse_release("v1.2").is_err());
    }

    #[test]
    fn releases_compare_by_number() {
        assert!(outdated("0.0.9", VERSION));
        assert!(!outdated(VERSION, VERSION));
        assert!(!outdated("99.0.0", VERSION));
        assert!(outdated("0.9.1", "0.10.0"));
        assert!(!outdated("1.2.3-rc.1", "1.2.3"));
        assert!(parse_release("1.2.3").is_ok());
        assert!(parse_release("1.2.3-rc.1").is_ok());
        let bad = parse_release("1.2").unwrap_err();
        assert!(bad.contains("MAJOR.MINOR.PATCH"), "{bad}");
    }
}
