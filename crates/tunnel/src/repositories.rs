//! Which repository paths a Git source's `repositories` globs admit: the bridge refuses the
//! others, and the cloud, told the globs when the bridge connects, refuses a repository
//! mapping to one of them when it is made rather than at its first commits lookup.

/// Most bytes of the JSON resource list, globs included, in which the bridge announces globs:
/// the connect request's head carries it, and the cloud reads a head of 16 KiB at most (the
/// token, names and other headers take the rest). A source whose globs no longer fit is
/// announced without them, and the cloud then takes any path for it.
pub const MAX_ANNOUNCED: usize = 12 * 1024;

/// Which bytes of a glob [`encoded`] escapes: controls, `%` itself and (always) non-ASCII.
const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// A glob as the bridge announces it: a header value must be visible ASCII to be read, so
/// controls, `%` and non-ASCII are percent-encoded; [`decoded`] gives the glob back exactly.
pub fn encoded(glob: &str) -> String {
    percent_encoding::utf8_percent_encode(glob, ESCAPED).to_string()
}

/// Whether `text` matches `pattern`, in which `*` matches any run of characters (including
/// `/`). Iterative, remembering only the last star: O(pattern × text) at worst, so no path can
/// make a rule with several stars explode.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// `text` with its `%XX` escapes decoded, read as UTF-8 (a byte sequence that is none becomes
/// U+FFFD): what a path or a URL's user name means to the server that decodes it.
pub fn decoded(text: &str) -> std::borrow::Cow<'_, str> {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy()
}

/// Whether the repository path `repo` is one of `globs` (every one when there are none); a
/// `.git` suffix on either side does not matter. Both are compared percent-decoded: git sends
/// `team/with%20space.git` (and `%c3%bc` in lowercase) for the `team/with space.git` an
/// operator writes. A leading `/` on the path does not matter either.
pub fn listed(globs: &[String], repo: &str) -> bool {
    let repo = decoded(repo.trim_start_matches('/'));
    let bare = repo.strip_suffix(".git").unwrap_or(&repo);
    globs.is_empty()
        || globs.iter().any(|g| {
            let g = decoded(g);
            glob(g.strip_suffix(".git").unwrap_or(&g), bare)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the bridge announces is what its config says, once decoded, whatever it holds.
    #[test]
    fn an_announced_glob_decodes_to_the_written_one() {
        for glob in [
            "team/*",
            "tëam/*",
            "pct%/x",
            "%41cme/*",
            "tab\there/*",
            "q\"uote/*",
        ] {
            let sent = encoded(glob);
            assert!(sent.bytes().all(|b| b.is_ascii_graphic()), "{sent}");
            assert_eq!(decoded(&sent), glob);
        }
    }

    #[test]
    fn globs_admit_paths_with_or_without_git_and_decoded() {
        let globs = vec!["team/*".to_string(), "infra/deploy.git".to_string()];
        assert!(listed(&globs, "/team/lib.git"));
        assert!(listed(&globs, "team/lib"));
        assert!(listed(&globs, "/infra/deploy"));
        assert!(listed(&globs, "/infra/deploy.git"));
        assert!(!listed(&globs, "/infra/other.git"));
        assert!(listed(&[], "/anything"));
        // Compared decoded, whichever side is encoded, in either hex case.
        let odd = vec![
            "team/with space.git".to_string(),
            "team/%C3%BCn".to_string(),
        ];
        assert!(listed(&odd, "/team/with%20space.git"));
        assert!(listed(&odd, "/team/%c3%bcn.git"));
        assert!(listed(&odd, "/team/%C3%BCn"));
        assert!(!listed(&odd, "/team/with%20spaces.git"));
    }
}
