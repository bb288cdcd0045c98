//! The cloud as a Git client of its own relay: the `git` CLI fetches a repository through
//! `/v1/bridges/{bridge}/git/{source}/{path}` on a loopback listener that serves only the
//! relay, with a key only this process accepts, into a partial (`blob:none`) bare mirror under
//! `DATA_DIR/git-mirrors/`. Later fetches are incremental; listing commits reads the mirror
//! only. Trees are fetched, blobs never: the files a commit changed come from its trees.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::auth::KeyCache;
use crate::storage::RepositorySource;

use super::gates::{self, Gates, Keyed};
pub use super::git_cli::GitError;
use super::git_cli::{GIT_TIMEOUT, git};

/// Most commits listed for one deployment; more are reported as truncated.
pub const MAX_COMMITS: usize = 250;
/// Most file names listed per commit.
const MAX_FILES: usize = 200;

/// Where the cloud's Git client keeps mirrors and reaches its relay.
#[derive(Debug, Clone)]
pub struct GitClient {
    /// `DATA_DIR/git-mirrors`.
    pub root: PathBuf,
    /// The loopback listener that serves the relay to this process.
    pub relay: SocketAddr,
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
    /// True when this is the history up to the commit rather than the commits since `from`:
    /// none was given, or it is no longer in the repository (a history rewritten since).
    pub whole_history: bool,
}

impl Listing {
    /// True when these are exactly the commits since the previous deployment: its commit was
    /// found and nothing was cut. Only then does the oldest one date the change lead time.
    pub fn complete(&self) -> bool {
        !self.whole_history && !self.truncated
    }
}

/// How old a first clone's temporary directory (`*.partial-{pid}`) must be to be deleted as
/// one left by a crash: older than any clone can run, since git is stopped at [`GIT_TIMEOUT`].
const PARTIAL_STALE: Duration = Duration::from_secs(GIT_TIMEOUT.as_secs() + 300);

/// The mirrors, with one lock each so that two requests never fetch into one at once, and
/// gates that bound how many listings run at once (correlation/gates.rs).
pub struct Mirrors {
    client: GitClient,
    keys: Arc<KeyCache>,
    locks: Keyed<PathBuf>,
    gates: Gates,
}

pub use crate::storage::is_commit_id;

/// What [`is_commit_id`] accepts, for error messages.
pub const COMMIT_ID_RULE: &str = "a commit id: 7 to 40 hex digits, or 64 (whole ids are best: an abbreviated one is found only on a branch or tag)";

/// Whether a failed fetch of one commit says the server does not have it (git's words across
/// protocol versions), rather than that the fetch could not be made.
fn names_a_missing_object(e: &GitError) -> bool {
    let GitError::Failed { message, .. } = e else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    [
        "not our ref",
        "couldn't find remote ref",
        "unadvertised object",
        "no such remote ref",
    ]
    .iter()
    .any(|said| message.contains(said))
}

impl Mirrors {
    /// Mirrors under `client.root`, fetched with internal keys from `keys`.
    pub fn new(client: GitClient, keys: Arc<KeyCache>) -> Self {
        Mirrors {
            client,
            keys,
            locks: Keyed::new(1),
            gates: Gates::new(gates::IN_ALL, gates::PER_ORG),
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
        let _held = self.locks.acquire(dir.clone()).await;
        let _pass = self.gates.enter(org_id).await;
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
                    // Protocol v2 serves any reachable commit, advertised or not. A server
                    // that does not have it says so, and the commit is missing (the caller's
                    // data); any other failure is the bridge's or the server's.
                    let fetched = git(
                        &dir,
                        &["fetch", "--quiet", "origin", sha],
                        Some(&key),
                        "fetch",
                    )
                    .await;
                    if let Err(e) = fetched
                        && !names_a_missing_object(&e)
                    {
                        return Err(e);
                    }
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
            whole_history: from.is_none(),
        })
    }

    /// Deletes the mirror of `source` once `unused` (checked while the mirror's lock is held,
    /// so that no fetch is running into it and no mapping started reading it meanwhile) says
    /// no mapping of the org reads it: unmapped repositories take no disk.
    pub async fn forget_if<F: std::future::Future<Output = bool>>(
        &self,
        org_id: i64,
        source: &RepositorySource,
        unused: impl FnOnce() -> F,
    ) {
        let dir = self.dir(org_id, source);
        let _held = self.locks.acquire(dir.clone()).await;
        if !unused().await {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(mirror = %dir.display(), cause = %e, "cannot delete an unmapped repository's mirror");
        }
    }

    /// Deletes the temporary directories of first clones that a crash (of this process or an
    /// earlier one) left behind, once older than [`PARTIAL_STALE`]: a clone running now is
    /// younger, whichever process runs it.
    pub async fn sweep_partials(&self) {
        let root = self.client.root.clone();
        let swept = tokio::task::spawn_blocking(move || stale_partials(&root, PARTIAL_STALE)).await;
        for dir in swept.unwrap_or_default() {
            tracing::info!(mirror = %dir.display(), "deleted the leftover of an interrupted first clone");
        }
    }

    /// `DATA_DIR/git-mirrors/{org}/{hash of bridge, source and path}.git`.
    fn dir(&self, org_id: i64, source: &RepositorySource) -> PathBuf {
        let digest = Sha256::digest(
            format!("{}\0{}\0{}", source.bridge, source.source, source.path).as_bytes(),
        );
        let name = crate::secrets::hex(&digest[..12]);
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

/// Deletes and returns the `*.partial-*` directories under `root/{org}/` last modified more
/// than `stale` ago.
fn stale_partials(root: &Path, stale: Duration) -> Vec<PathBuf> {
    let orgs = std::fs::read_dir(root).into_iter().flatten().flatten();
    let entries = orgs.flat_map(|org| {
        std::fs::read_dir(org.path())
            .into_iter()
            .flatten()
            .flatten()
    });
    entries
        .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > stale))
        })
        .map(|e| e.path())
        .filter(|dir| std::fs::remove_dir_all(dir).is_ok())
        .collect()
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
mod tests;
