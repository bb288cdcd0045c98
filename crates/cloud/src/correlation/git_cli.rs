//! The `git` CLI as the mirrors run it: hermetic (no user or system configuration, no proxy,
//! no prompt), in a process group killed whole when dropped or too slow, and its failures read
//! into [`GitError`] without the relay's loopback address.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

/// The longest one `git` command may take (a first fetch of a large repository).
pub(super) const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why commits could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` is not installed or cannot be started.
    #[error("cannot run git ({0}); install git on the cloud's host")]
    Spawn(std::io::Error),
    /// The mirror's directory cannot be made.
    #[error("cannot create the mirror {path}: {cause}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The relay answered the fetch with an HTTP error status.
    #[error("the relay answered {status}{}", said_after(.said))]
    Http {
        /// The status git reported.
        status: u16,
        /// The refusal's own words, which git printed as `remote:` lines (the bridge's reason:
        /// an allow rule, a time-out); empty when there were none.
        said: String,
    },
    /// Git failed otherwise; its last error line.
    #[error("git {step} failed: {message}")]
    Failed {
        /// clone, fetch or log.
        step: &'static str,
        /// git's last line on stderr.
        message: String,
    },
    /// A commit is not in the repository, even after fetching it.
    #[error("commit {0} is not in the repository")]
    MissingCommit(String),
    /// The server cannot leave file contents out of a clone (a partial clone): the mirror
    /// would hold every file of every commit.
    #[error(
        "the Git server does not serve partial clones (for git http-backend: uploadpack.allowFilter true), and the cloud mirrors commits and trees only, never file contents; enable it on the server to list this repository's commits"
    )]
    NoFilter,
    /// A git command ran longer than its limit.
    #[error("git {0} took longer than {GIT_TIMEOUT:?}")]
    TimedOut(&'static str),
    /// A git command wrote more than the cloud reads (a history made to list huge trees).
    #[error("git {0} wrote more than {MAX_OUTPUT} bytes; stopped it")]
    TooMuch(&'static str),
}

/// The most of a git command's output the cloud reads: 251 commits with up to 200 paths each
/// fit many times over; a history of trees made to list millions of paths does not.
pub(super) const MAX_OUTPUT: u64 = 16 * 1024 * 1024;
/// The most of git's stderr kept (its last lines), and of one line read.
const MAX_STDERR: usize = 8 * 1024;

/// Runs `git args` in `dir`, hermetically: an empty environment but `PATH` (no system or
/// user configuration, no proxy, no prompts, no lazy blob fetches, no redirects followed), in
/// a process group of its own that is killed whole if the command is dropped or times out;
/// `key` goes as a Bearer header through the environment, never the command line. Its stdout.
pub(super) async fn git(
    dir: &Path,
    args: &[&str],
    key: Option<&str>,
    step: &'static str,
) -> Result<String, GitError> {
    let mut command = Command::new("git");
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_COUNT", if key.is_some() { "3" } else { "2" })
        .env("GIT_CONFIG_KEY_0", "http.followRedirects")
        .env("GIT_CONFIG_VALUE_0", "false")
        .env("GIT_CONFIG_KEY_1", "core.quotePath")
        .env("GIT_CONFIG_VALUE_1", "false")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(key) = key {
        command
            .env("GIT_CONFIG_KEY_2", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_2", format!("Authorization: Bearer {key}"));
    }
    let mut child = command.spawn().map_err(GitError::Spawn)?;
    let mut group = Group(child.id());
    let (Some(mut stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(GitError::Spawn(std::io::Error::other("no pipes to git")));
    };
    // Both streams read within bounds: an answer past them stops the command (its group is
    // killed when `group` drops), never the cloud's memory.
    let read_stdout = async {
        let mut out = Vec::new();
        (&mut stdout)
            .take(MAX_OUTPUT + 1)
            .read_to_end(&mut out)
            .await
            .map_err(GitError::Spawn)?;
        if out.len() as u64 > MAX_OUTPUT {
            return Err(GitError::TooMuch(step));
        }
        Ok::<_, GitError>(out)
    };
    // A server that cannot leave file contents out says so before it sends them: stop there.
    let watch_stderr = async {
        let (mut stderr, mut text, mut line) = (BufReader::new(stderr), String::new(), Vec::new());
        // Lines as bytes: a server's `remote:` message or a path need not be UTF-8.
        while {
            line.clear();
            (&mut stderr)
                .take(MAX_STDERR as u64)
                .read_until(b'\n', &mut line)
                .await
                .map_err(GitError::Spawn)?
                > 0
        } {
            let line = String::from_utf8_lossy(&line);
            if line.contains(FILTER_IGNORED) {
                return Err(GitError::NoFilter);
            }
            text.push_str(&line);
            if text.len() > 2 * MAX_STDERR {
                let mut cut = text.len() - MAX_STDERR;
                while !text.is_char_boundary(cut) {
                    cut += 1;
                }
                text.drain(..cut);
            }
        }
        Ok(text)
    };
    let run = async {
        let (out, err) = tokio::try_join!(read_stdout, watch_stderr)?;
        let status = child.wait().await.map_err(GitError::Spawn)?;
        Ok::<_, GitError>((status, out, err))
    };
    let (status, stdout, stderr) = tokio::time::timeout(GIT_TIMEOUT, run)
        .await
        .map_err(|_| GitError::TimedOut(step))??;
    // Exited by itself: its helpers are done, and the group id may be reused.
    group.0 = None;
    if status.success() {
        return Ok(String::from_utf8_lossy(&stdout).into_owned());
    }
    Err(failure(step, &stderr))
}

/// What git says when the server ignores `--filter=blob:none` and would send every file.
const FILTER_IGNORED: &str = "filtering not recognized by server";

/// A git command's process group, killed whole when dropped unfinished (its `git-remote-http`
/// and `index-pack` helpers would otherwise go on writing into the mirror).
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self
            .0
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// `: said`, or nothing when `said` is empty.
fn said_after(said: &str) -> String {
    if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    }
}

/// The most of a refusal's words kept from git's `remote:` lines.
const MAX_SAID: usize = 1024;

/// The `remote:` lines of git's stderr, joined: what the relay's text refusal said.
fn remote_words(stderr: &str) -> String {
    let said: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut said = said.join(" ");
    if said.len() > MAX_SAID {
        let mut cut = MAX_SAID;
        while !said.is_char_boundary(cut) {
            cut -= 1;
        }
        said.truncate(cut);
        said.push('…');
    }
    said
}

/// What git's stderr says went wrong: an HTTP status when the relay refused (git words a 404
/// and a 401 its own way), with the refusal's words, else its last line, without the relay's
/// loopback address.
fn failure(step: &'static str, stderr: &str) -> GitError {
    let status = stderr
        .split("returned error: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .or_else(|| {
            if stderr.contains("' not found") {
                Some(404)
            } else if stderr.contains("Authentication failed") {
                Some(401)
            } else {
                None
            }
        });
    if let Some(status) = status {
        return GitError::Http {
            status,
            said: remote_words(stderr),
        };
    }
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message");
    let message = match (last.find("'http://"), last.rfind('\'')) {
        (Some(start), Some(end)) if end > start => {
            format!("{}the repository{}", &last[..start], &last[end + 1..])
        }
        _ => last.to_string(),
    };
    GitError::Failed { step, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that writes more than the cloud reads is stopped with an error naming the
    /// step, and the cloud holds no more than the bound (here a 17 MiB blob printed whole).
    #[tokio::test]
    async fn output_past_the_bound_stops_the_command() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"], None, "init")
            .await
            .unwrap();
        let blob = dir.path().join("big");
        std::fs::write(&blob, vec![b'x'; MAX_OUTPUT as usize + 1024 * 1024]).unwrap();
        let sha = git(dir.path(), &["hash-object", "-w", "big"], None, "hash")
            .await
            .unwrap();
        let printed = git(dir.path(), &["cat-file", "-p", sha.trim()], None, "log").await;
        assert!(
            matches!(printed, Err(GitError::TooMuch("log"))),
            "{:?}",
            printed.map(|text| text.len())
        );
    }

    #[test]
    fn git_failures_name_the_status_and_hide_the_loopback_address() {
        let not_found = "remote: x\nfatal: repository 'http://127.0.0.1:41234/v1/bridges/dc1/git/code/a.git/' not found\n";
        assert!(matches!(
            failure("clone", not_found),
            GitError::Http { status: 404, .. }
        ));
        let refused = "fatal: unable to access 'http://127.0.0.1:41234/v1/x/': The requested URL returned error: 503\n";
        assert!(matches!(
            failure("fetch", refused),
            GitError::Http { status: 503, .. }
        ));
        // The refusal's words, as git printed them, go with the status.
        let ruled = "remote: GET /acme/api.git/info/refs matches no allow rule\nremote: of the entry\nfatal: unable to access 'http://127.0.0.1:41234/v1/x/': The requested URL returned error: 403\n";
        let GitError::Http { status: 403, said } = failure("fetch", ruled) else {
            panic!("not a 403");
        };
        assert_eq!(
            said,
            "GET /acme/api.git/info/refs matches no allow rule of the entry"
        );
        let other = "fatal: unable to access 'http://127.0.0.1:41234/v1/x/': Failed to connect\n";
        let GitError::Failed { message, .. } = failure("fetch", other) else {
            panic!("not a plain failure");
        };
        assert_eq!(
            message,
            "fatal: unable to access the repository: Failed to connect"
        );
    }
}
