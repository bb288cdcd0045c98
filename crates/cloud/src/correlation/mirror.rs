//! The cloud as a Git client of its own relay: the `git` CLI fetches a repository through
//! `/v1/bridges/{bridge}/git/{source}/{path}` on a loopback listener that serves only the
//! relay, with a key only this process accepts, into a partial (`blob:none`) bare mirror under
//! `DATA_DIR/git-mirrors/`. Later fetches are incremental; listing commits reads the mirror
//! only. Trees are fetched, blobs never: the files a commit changed come from its trees.

use std::collections::HashMap;
use std::net::SocketAddr;
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

/// The mirrors, with one lock each so that two requests never fetch into one at once.
pub struct Mirrors {
    client: GitClient,
    keys: Arc<KeyCache>,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

/// True for what may be a commit id: 7 to 64 hex digits (never an option to git).
pub fn is_commit_id(sha: &str) -> bool {
    (7..=64).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Mirrors {
    /// Mirrors under `client.root`, fetched with internal keys from `keys`.
    pub fn new(client: GitClient, keys: Arc<KeyCache>) -> Self {
        Mirrors {
            client,
            keys,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The commits in `to` that `from` lacks (all of `to`'s history when `from` is `None`),
    /// newest first, at most [`MAX_COMMITS`]; and whether there were more.
    pub async fn commits(
        &self,
        org_id: i64,
        source: &RepositorySource,
        from: Option<&str>,
        to: &str,
    ) -> Result<(Vec<Commit>, bool), GitError> {
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
            for sha in &wanted {
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
        let range = match from {
            Some(from) if self.has_all(&dir, &[from]).await? => format!("{from}..{to}"),
            _ => to.to_string(),
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
        Ok((commits, truncated))
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

    /// A first, partial clone into a temporary directory, renamed into place when whole.
    async fn clone_into(&self, dir: &Path, url: &str, key: &str) -> Result<(), GitError> {
        let parent = dir.parent().unwrap_or(&self.client.root);
        std::fs::create_dir_all(parent).map_err(|cause| GitError::Dir {
            path: parent.to_path_buf(),
            cause,
        })?;
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let target = partial.to_string_lossy().into_owned();
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
        std::fs::rename(&partial, dir).map_err(|cause| GitError::Dir {
            path: dir.to_path_buf(),
            cause,
        })
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

/// Runs `git args` in `dir`, hermetically (no system or user configuration, no prompts, no
/// lazy blob fetches), with `key` sent as a Bearer header when given (through the
/// environment, never the command line); its stdout.
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
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(key) = key {
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_0", format!("Authorization: Bearer {key}"));
    }
    let out = tokio::time::timeout(GIT_TIMEOUT, command.output())
        .await
        .map_err(|_| GitError::TimedOut(step))?
        .map_err(GitError::Spawn)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(status) = stderr
        .split("returned error: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
    {
        return Err(GitError::Http { status });
    }
    Err(GitError::Failed {
        step,
        message: stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message")
            .to_string(),
    })
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
        assert!(!is_commit_id("--upload-pack=x"));
        assert!(!is_commit_id("abc"));
        assert!(!is_commit_id("main"));
    }
}
