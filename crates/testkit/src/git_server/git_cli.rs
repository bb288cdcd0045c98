//! The `git` client as the tests run it: a clean environment (nothing from the caller's git
//! config, hooks, proxies or askpass), `main` as the default branch, and `git fast-import` to
//! write repositories quickly.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::INSTALL;

pub(crate) const COMMITTER: &str = "committer testkit <testkit@example.invalid>";

/// Feeds `git fast-import` (with `git -c` options `opts`) the stream that `feed` writes.
pub(crate) fn fast_import(
    repo: &Path,
    opts: &[&str],
    feed: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) {
    let args = [opts, &["fast-import", "--quiet", "--date-format=now"]].concat();
    let mut cmd = git_command(repo, &args, &[]);
    let cmd = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run git ({e}): {INSTALL}"));
    let mut stdin = std::io::BufWriter::new(child.stdin.take().expect("piped stdin"));
    let fed = feed(&mut stdin).and_then(|()| stdin.flush());
    drop(stdin);
    let out = child
        .wait_with_output()
        .expect("GitServer: wait for git fast-import");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && fed.is_ok(),
        "git fast-import: {fed:?} {err}"
    );
}

const CLEAN_ENV: [(&str, &str); 7] = [
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_AUTHOR_NAME", "testkit"),
    ("GIT_AUTHOR_EMAIL", "testkit@example.invalid"),
    ("GIT_COMMITTER_NAME", "testkit"),
    ("GIT_COMMITTER_EMAIL", "testkit@example.invalid"),
];

fn git_command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("git");
    // Nothing from the caller's git (hooks set GIT_DIR etc.), proxies, askpass or config.
    for (k, _) in std::env::vars() {
        if k.starts_with("GIT_") || k.to_lowercase().ends_with("_proxy") || k.ends_with("ASKPASS") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(dir)
        .args(["-c", "init.defaultBranch=main"])
        .args(args);
    cmd.envs(CLEAN_ENV).envs(env.iter().copied());
    cmd
}

/// Runs the `git` on PATH in `dir` with a clean test environment plus `env`.
pub fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = git_command(dir, args, env).stdin(Stdio::null()).output();
    out.unwrap_or_else(|e| panic!("cannot run git ({e}): {INSTALL}"))
}

/// Runs git, panics with its stderr on failure, returns its trimmed stdout.
pub(crate) fn run(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args, &[]);
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    let err = text(&out.stderr);
    assert!(
        out.status.success(),
        "git {args:?} in {dir:?} failed: {err}"
    );
    text(&out.stdout)
}
