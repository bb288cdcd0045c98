//! The git test server itself: real nginx + fcgiwrap + git http-backend, auth enforced.

use std::path::Path;

use testkit::git_server::{GitAuth, GitServer, git};

fn ok(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = git(dir, args, env);
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn with_creds(server: &GitServer, creds: &str, path: &str) -> String {
    server
        .url()
        .replacen("http://", &format!("http://{creds}@"), 1)
        + path
}

#[test]
fn basic_auth_clone_shallow_partial_push() {
    let server = GitServer::start(GitAuth::Basic {
        user: "alice".into(),
        password: "s3cret".into(),
    });
    server.create_repo("team/lib.git", 3);
    let work = tempfile::tempdir().expect("tempdir");
    let w = work.path();
    let url = with_creds(&server, "alice:s3cret", "/team/lib.git");

    ok(w, &["clone", "-q", &url, "full"], &[]);
    assert_eq!(
        ok(&w.join("full"), &["rev-list", "--count", "HEAD"], &[]),
        "3"
    );

    let anon = server.url() + "/team/lib.git";
    assert!(
        !git(w, &["clone", "-q", &anon, "anon"], &[])
            .status
            .success()
    );
    let wrong = with_creds(&server, "alice:nope", "/team/lib.git");
    assert!(
        !git(w, &["clone", "-q", &wrong, "wrong"], &[])
            .status
            .success()
    );

    ok(w, &["clone", "-q", "--depth", "1", &url, "shallow"], &[]);
    let shallow = w.join("shallow");
    assert_eq!(ok(&shallow, &["rev-list", "--count", "HEAD"], &[]), "1");
    assert!(shallow.join(".git/shallow").exists());

    ok(
        w,
        &["clone", "-q", "--filter=blob:none", &url, "partial"],
        &[],
    );
    let filter = ["config", "remote.origin.partialclonefilter"];
    assert_eq!(ok(&w.join("partial"), &filter, &[]), "blob:none");

    // Push (allowed by the server), then a commit made on the server side.
    let full = w.join("full");
    std::fs::write(full.join("pushed.txt"), "pushed\n").expect("write");
    ok(&full, &["add", "pushed.txt"], &[]);
    ok(&full, &["commit", "-q", "-m", "pushed"], &[]);
    ok(&full, &["push", "-q", "origin", "HEAD:main"], &[]);
    let head = ok(&full, &["rev-parse", "HEAD"], &[]);
    let repo = server.repos_dir().join("team/lib.git");
    assert_eq!(ok(&repo, &["rev-parse", "main"], &[]), head);
    let sha = server.commit("team/lib.git", "server.txt", "from the server\n");
    let remote = ok(w, &["ls-remote", &url, "refs/heads/main"], &[]);
    assert!(remote.starts_with(&sha), "{remote}");

    let log = server.access_log();
    assert!(log.contains("git-receive-pack HTTP/1.1\" 200"), "{log}");
    assert!(log.contains(" 401 "), "{log}");
    assert!(log.contains("user=alice proto=version=2"), "{log}");
}

#[test]
fn bearer_auth() {
    let server = GitServer::start(GitAuth::Bearer("tok-123".into()));
    server.create_repo("team/lib.git", 2);
    let work = tempfile::tempdir().expect("tempdir");
    let w = work.path();
    let url = server.url() + "/team/lib.git";
    let header = |t: &str| format!("http.extraHeader=Authorization: Bearer {t}");

    ok(
        w,
        &["-c", &header("tok-123"), "clone", "-q", &url, "ok"],
        &[],
    );
    assert_eq!(
        ok(&w.join("ok"), &["rev-list", "--count", "HEAD"], &[]),
        "2"
    );
    let wrong = git(
        w,
        &["-c", &header("nope"), "clone", "-q", &url, "wrong"],
        &[],
    );
    assert!(!wrong.status.success());
    assert!(!git(w, &["clone", "-q", &url, "anon"], &[]).status.success());
}

#[test]
fn anonymous_big_repo() {
    let server = GitServer::start(GitAuth::None);
    let repo = server.create_big_repo("big.git", 3);
    let packed: u64 = std::fs::read_dir(repo.join("objects/pack"))
        .expect("pack dir")
        .map(|e| e.expect("entry").metadata().expect("metadata").len())
        .sum();
    assert!(packed >= 3 << 20, "{packed} bytes packed");
    let work = tempfile::tempdir().expect("tempdir");
    let url = server.url() + "/big.git";
    ok(work.path(), &["clone", "-q", &url, "big"], &[]);
    let files = ok(&work.path().join("big"), &["ls-files"], &[]);
    assert_eq!(files.lines().count(), 3, "{files}");
}
