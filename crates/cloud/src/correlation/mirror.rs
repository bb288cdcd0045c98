//! The cloud as a Git client of its own relay: the `git` CLI fetches a repository through
//! `/v1/bridges/{bridge}/git/{source}/{path}` on a loopback listener that serves only the
//! relay, with a key only this process accepts, into a partial (`blob:none`) bare mirror under
//! `DATA_DIR/git-mirrors/`. Later fetches are incremental; listing commits reads the mirror
//! only. Trees are fetched, blobs never: the files a commit changed come from its trees.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::process::Command;

use crate::auth::KeyCache;
use crate::storage::RepositorySource;

/// Most commits listed for one deployment; more are reported as truncated.
pub const MAX_COMMITS: usize = 250;
/// Most file names listed per commit.
const MAX_FILES: usize = 200;
/// The longest one `git` command may take (a first fetch of a large repository).
const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the cloud's Git client keeps mirrors and reaches its relay.
#[derive(Debug, Clone)]
pub struct GitClient {
    /// `DATA_DIR/git-mirrors`.
    pub root: PathBuf,
    /// The loopback listener that serves the relay to this process.
    pub relay: SocketAddr,
}

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
    #[error("the relay answered {status}")]
    Http {
        /// The status git reported.
        status: u16,
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
    /// A git command ran longer than its limit.
    #[error("git {0} took longer than {GIT_TIMEOUT:?}")]
    TimedOut(&'static str),
}

/// One commit as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Commit {
    /// Its full id.
    pub sha: String,
    /// The author's name.
    pub author: String,
    /// When it was committed (RFC 3339).
    pub time: String,
    /// Its subject line.
    pub subject: String,
    /// The paths it changed (at most 200).
    pub files: Vec<String>,
}

/// What [`Mirrors::commits`] found.
#[derive(Debug)]
pub struct Listing {
    /// Newest first.
    pub commits: Vec<Commit>,
    /// True when there were more than [`MAX_COMMITS`].
    pub truncated: bool,
    /// True when these are exactly the commits since the previous deployment: its commit was
    /// found and nothing was cut. Only then does the oldest one date the change lead time.
    pub complete: bool,
}

/// The mirrors, with one lock each so that two requests never fetch into one at once.
pub struct Mirrors {
    client: GitClient,
    keys: Arc<KeyCache>,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

/// True for what may be a commit id: 7 to 40 hex digits (SHA-1, abbreviated or whole), or 64
/// (SHA-256); never an option to git. Only whole ids can be fetched by id: an abbreviated one
/// must be on a branch or tag.
pub fn is_commit_id(sha: &str) -> bool {
    ((7..=40).contains(&sha.len()) || sha.len() == 64) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What [`is_commit_id`] accepts, for error messages.
pub const COMMIT_ID_RULE: &str = "a commit id: 7 to 40 hex digits, or 64 (whole ids are best: an abbreviated one is found only on a branch or tag)";

impl Mirrors {
    /// Mirrors under `client.root`, fetched with internal keys from `keys`.
    pub fn new(client: GitClient, keys: Arc<KeyCache>) -> Self {
        Mirrors {
            client,
            keys,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The commits in `to` that `from` lacks, newest first, at most [`MAX_COMMITS`]. When
    /// `from` is `None` or not in the repository (a history rewritten since), `to`'s own
    /// history instead, and [`Listing::complete`] is false.
    pub async fn commits(
        &self,
        org_id: i64,
        source: &RepositorySource,
        from: Option<&str>,
        to: &str,
    ) -> Result<Listing, GitError> {
        let dir = self.dir(org_id, source);
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(dir.clone())
            .or_default()
            .clone();
        let _held = lock.lock().await;
        let key = self.keys.internal_key(org_id);
        let url = format!(
            "http://{}/v1/bridges/{}/git/{}/{}",
            self.client.relay, source.bridge, source.source, source.path
        );
        if !dir.join("HEAD").exists() {
            self.clone_into(&dir, &url, &key).await?;
        }
        let wanted: Vec<&str> = from.into_iter().chain([to]).collect();
        if !self.has_all(&dir, &wanted).await? {
            git(&dir, &["remote", "set-url", "origin", &url], None, "fetch").await?;
            git(&dir, &["fetch", "--quiet", "origin"], Some(&key), "fetch").await?;
            for sha in wanted.iter().filter(|s| matches!(s.len(), 40 | 64)) {
                if !self.has_all(&dir, &[sha]).await? {
                    // Protocol v2 serves any reachable commit, advertised or not.
                    let _ = git(
                        &dir,
                        &["fetch", "--quiet", "origin", sha],
                        Some(&key),
                        "fetch",
                    )
                    .await;
                }
            }
        }
        if !self.has_all(&dir, &[to]).await? {
            return Err(GitError::MissingCommit(to.to_string()));
        }
        let from = match from {
            Some(from) if self.has_all(&dir, &[from]).await? => Some(from),
            _ => None,
        };
        let range = match from {
            Some(from) => format!("{from}..{to}"),
            None => to.to_string(),
        };
        let max = format!("--max-count={}", MAX_COMMITS + 1);
        let out = git(
            &dir,
            &[
                "log",
                "--no-renames",
                "--name-only",
                &max,
                "--format=%x1e%H%x1f%an%x1f%cI%x1f%s",
                &range,
                "--",
            ],
            None,
            "log",
        )
        .await?;
        let mut commits = parse_log(&out);
        let truncated = commits.len() > MAX_COMMITS;
        commits.truncate(MAX_COMMITS);
        Ok(Listing {
            commits,
            truncated,
            complete: from.is_some() && !truncated,
        })
    }

    /// `DATA_DIR/git-mirrors/{org}/{hash of bridge, source and path}.git`.
    fn dir(&self, org_id: i64, source: &RepositorySource) -> PathBuf {
        let digest = Sha256::digest(
            format!("{}\0{}\0{}", source.bridge, source.source, source.path).as_bytes(),
        );
        let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        self.client
            .root
            .join(org_id.to_string())
            .join(format!("{name}.git"))
    }

    /// A first, partial clone into a temporary directory of this process, renamed into place
    /// when whole (another process sharing the data directory may have won the race: its
    /// mirror is as good). The mirrors' directories are the service user's only.
    async fn clone_into(&self, dir: &Path, url: &str, key: &str) -> Result<(), GitError> {
        let parent = dir.parent().unwrap_or(&self.client.root);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|cause| GitError::Dir {
                path: parent.to_path_buf(),
                cause,
            })?;
        // A directory left without HEAD (an interrupted rename) is no mirror.
        if dir.exists() && !dir.join("HEAD").exists() {
            let _ = std::fs::remove_dir_all(dir);
        }
        let partial = dir.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        let target = partial
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cloned = git(
            parent,
            &[
                "clone",
                "--quiet",
                "--bare",
                "--filter=blob:none",
                url,
                &target,
            ],
            Some(key),
            "clone",
        )
        .await;
        if let Err(e) = cloned {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
        // A bare clone has no fetch refspec: branches and tags, kept as the server has them.
        for spec in ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"] {
            git(
                &partial,
                &["config", "--add", "remote.origin.fetch", spec],
                None,
                "clone",
            )
            .await?;
        }
        match std::fs::rename(&partial, dir) {
            Ok(()) => Ok(()),
            Err(_) if dir.join("HEAD").exists() => {
                let _ = std::fs::remove_dir_all(&partial);
                Ok(())
            }
            Err(cause) => Err(GitError::Dir {
                path: dir.to_path_buf(),
                cause,
            }),
        }
    }

    /// Whether the mirror has every commit of `shas`.
    async fn has_all(&self, dir: &Path, shas: &[&str]) -> Result<bool, GitError> {
        for sha in shas {
            let object = format!("{sha}^{{commit}}");
            if git(dir, &["cat-file", "-e", &object], None, "log")
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Runs `git args` in `dir`, hermetically: an empty environment but `PATH` (no system or
/// user configuration, no proxy, no prompts, no lazy blob fetches, no redirects followed), in
/// a process group of its own that is killed whole if the command is dropped or times out;
/// `key` goes as a Bearer header through the environment, never the command line. Its stdout.
async fn git(
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
    let child = command.spawn().map_err(GitError::Spawn)?;
    let mut group = Group(child.id());
    let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| GitError::TimedOut(step))?
        .map_err(GitError::Spawn)?;
    // Exited by itself: its helpers are done, and the group id may be reused.
    group.0 = None;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(failure(step, &stderr))
}

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

/// What git's stderr says went wrong: an HTTP status when the relay refused (git words a 404
/// and a 401 its own way), else its last line, without the relay's loopback address.
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
        return GitError::Http { status };
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

/// `git log --name-only --format=%x1e%H%x1f%an%x1f%cI%x1f%s` output as commits.
fn parse_log(out: &str) -> Vec<Commit> {
    out.split('\x1e')
        .filter(|chunk| !chunk.trim().is_empty())
        .filter_map(|chunk| {
            let (head, files) = chunk.split_once('\n').unwrap_or((chunk, ""));
            let mut fields = head.split('\x1f');
            let (sha, author, time, subject) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            Some(Commit {
                sha: sha.to_string(),
                author: author.to_string(),
                time: time.to_string(),
                subject: subject.to_string(),
                files: files
                    .lines()
                    .filter(|l| !l.is_empty())
                    .take(MAX_FILES)
                    .map(str::to_string)
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_output_becomes_commits_with_their_files() {
        let out = "\x1eaaa\x1fAda\x1f2026-01-02T03:04:05+00:00\x1fFix: payments\n\npayments/a.rs\nREADME.md\n\x1ebbb\x1fBob\x1f2026-01-01T00:00:00+00:00\x1fEmpty\n";
        let commits = parse_log(out);
        assert_eq!(commits.len(), 2);
        assert_eq!(commits[0].sha, "aaa");
        assert_eq!(commits[0].author, "Ada");
        assert_eq!(commits[0].subject, "Fix: payments");
        assert_eq!(commits[0].files, ["payments/a.rs", "README.md"]);
        assert!(commits[1].files.is_empty());
    }

    #[test]
    fn only_hex_ids_reach_git() {
        assert!(is_commit_id("0123abc"));
        assert!(is_commit_id(&"a".repeat(40)));
        assert!(is_commit_id(&"a".repeat(64)));
        assert!(!is_commit_id(&"a".repeat(41)));
        assert!(!is_commit_id("--upload-pack=x"));
        assert!(!is_commit_id("abc"));
        assert!(!is_commit_id("main"));
    }

    #[test]
    fn git_failures_name_the_status_and_hide_the_loopback_address() {
        let not_found = "remote: x\nfatal: repository 'http://127.0.0.1:41234/v1/bridges/dc1/git/code/a.git/' not found\n";
        assert!(matches!(
            failure("clone", not_found),
            GitError::Http { status: 404 }
        ));
        let refused = "fatal: unable to access 'http://127.0.0.1:41234/v1/x/': The requested URL returned error: 503\n";
        assert!(matches!(
            failure("fetch", refused),
            GitError::Http { status: 503 }
        ));
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
