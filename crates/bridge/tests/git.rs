//! Git through the bridge: the real `git` client against `cloud`, the real `bridge`, and a real
//! Git server (nginx + fcgiwrap + `git http-backend`) that enforces its own authentication.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use testkit::bridge::{Rig, bridge_bin, yaml_for};
use testkit::git_server::{GitAuth, GitServer, git};

/// The source token the Git server accepts (as the password of user `x-access-token`).
const GIT_TOKEN: &str = "ghs-SECRET-source-token";

fn server() -> GitServer {
    GitServer::start(GitAuth::Basic {
        user: "x-access-token".into(),
        password: GIT_TOKEN.into(),
    })
}

/// Four sources on one server: `code` (fetch only), `code-rw` (`allow_push`), `team` (only
/// `team/*` repositories) and `narrow` (an allow rule for git's `GET` only).
fn sources(server: &GitServer, token: &str) -> String {
    let url = server.url();
    format!(
        "sources:\n  - {{type: git, name: code, url: {url}, auth: {{type: token, token: {token}}}}}\n  - {{type: git, name: code-rw, url: {url}, allow_push: true, auth: {{type: token, token: {token}}}}}\n  - {{type: git, name: team, url: {url}, repositories: [\"team/*\"], auth: {{type: token, token: {token}}}}}\n  - {{type: git, name: narrow, url: {url}, allow: [{{method: GET, path: \"/team/*\"}}], auth: {{type: token, token: {token}}}}}\n"
    )
}

/// `http://x:KEY@cloud/v1/bridges/dc1/git/{source}/{repo}`: the clone URL of the docs.
fn clone_url(rig: &Rig, key: &str, source: &str, repo: &str) -> String {
    let host = rig.cloud.http.trim_start_matches("http://");
    format!("http://x:{key}@{host}/v1/bridges/dc1/git/{source}/{repo}")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(out: &Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn count_commits(dir: &Path) -> usize {
    ok(&git(dir, &["rev-list", "--count", "HEAD"], &[]), "rev-list")
        .trim()
        .parse()
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_fetch_pull_shallow_partial_and_protocol_v2() {
    let server = server();
    server.create_repo("team/lib.git", 3);
    let rig = Rig::start_with(|_| sources(&server, GIT_TOKEN)).await;
    let work = tempfile::tempdir().unwrap();
    let url = clone_url(&rig, &rig.tenant.api_key, "code", "team/lib.git");

    let refs = ok(&git(work.path(), &["ls-remote", &url], &[]), "ls-remote");
    assert!(refs.contains("refs/heads/main"), "{refs}");
    ok(&git(work.path(), &["clone", &url, "full"], &[]), "clone");
    let full = work.path().join("full");
    assert_eq!(count_commits(&full), 3);

    // A commit on the server arrives with fetch and pull.
    let new = server.commit("team/lib.git", "later.txt", "one more\n");
    ok(&git(&full, &["fetch", "origin"], &[]), "fetch");
    let fetched = ok(&git(&full, &["rev-parse", "origin/main"], &[]), "rev-parse");
    assert_eq!(fetched.trim(), new);
    ok(&git(&full, &["pull", "--ff-only"], &[]), "pull");
    assert_eq!(
        std::fs::read_to_string(full.join("later.txt")).unwrap(),
        "one more\n"
    );

    // Shallow and partial clones.
    ok(
        &git(
            work.path(),
            &["clone", "--depth", "1", &url, "shallow"],
            &[],
        ),
        "shallow clone",
    );
    assert_eq!(count_commits(&work.path().join("shallow")), 1);
    assert!(work.path().join("shallow/.git/shallow").exists());
    ok(
        &git(
            work.path(),
            &["clone", "--filter=blob:none", &url, "partial"],
            &[],
        ),
        "partial clone",
    );
    let filter = ok(
        &git(
            &work.path().join("partial"),
            &["config", "remote.origin.partialclonefilter"],
            &[],
        ),
        "config",
    );
    assert_eq!(filter.trim(), "blob:none");

    // The Bearer form of the API key works too.
    let bare = format!("{}/v1/bridges/dc1/git/code/team/lib.git", rig.cloud.http);
    let header = format!(
        "http.extraHeader=Authorization: Bearer {}",
        rig.tenant.api_key
    );
    ok(
        &git(work.path(), &["-c", &header, "clone", &bare, "bearer"], &[]),
        "bearer clone",
    );
    // A key in that form that is not valid is said, not answered with a password prompt.
    let wrong = "http.extraHeader=Authorization: Bearer sigapi_0000000000000000_wrong";
    let err = failed(
        &git(
            work.path(),
            &["-c", wrong, "ls-remote", &bare],
            &[("GIT_TERMINAL_PROMPT", "0")],
        ),
        "a wrong Bearer key",
    );
    assert!(err.contains("remote: the API key is not valid"), "{err}");

    // Protocol v2 went both ways: the server saw the client's Git-Protocol header, and the
    // bridge authenticated as x-access-token.
    let access = server.access_log();
    assert!(access.contains("proto=version=2"), "{access}");
    assert!(access.contains("user=x-access-token"), "{access}");

    // Gzip-encoded request bodies (git sends them for large negotiations) pass unchanged.
    let want = format!("0032want {new}\n00000009done\n");
    let gz = Command::new("gzip")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(want.as_bytes())?;
            c.wait_with_output()
        })
        .expect("gzip");
    let response = rig
        .cloud
        .client()
        .post(format!("{bare}/git-upload-pack"))
        .basic_auth("x", Some(&rig.tenant.api_key))
        .header("content-type", "application/x-git-upload-pack-request")
        .header("content-encoding", "gzip")
        .body(gz.stdout)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.unwrap();
    assert!(
        body.windows(4).any(|w| w == b"PACK"),
        "no pack in the answer to a gzip request"
    );

    // Audit records name the kind `git` and the rule, never the token.
    let records = rig.bridge.audit_records(8).await;
    assert!(records.iter().all(|r| r["kind"] == "git"), "{records:?}");
    assert!(
        records
            .iter()
            .any(|r| r["rule"] == "git fetch (git-upload-pack)" && r["decision"] == "allowed")
    );
    assert_secret_absent(&rig, GIT_TOKEN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_refused_by_default_allowed_with_allow_push() {
    let server = server();
    server.create_repo("team/lib.git", 2);
    let rig = Rig::start_with(|_| sources(&server, GIT_TOKEN)).await;
    let work = tempfile::tempdir().unwrap();
    let key = &rig.tenant.api_key;
    let url = clone_url(&rig, key, "code", "team/lib.git");
    ok(&git(work.path(), &["clone", &url, "w"], &[]), "clone");
    let w = work.path().join("w");
    std::fs::write(w.join("new.txt"), "pushed\n").unwrap();
    ok(&git(&w, &["add", "new.txt"], &[]), "add");
    ok(&git(&w, &["commit", "-qm", "push me"], &[]), "commit");

    let err = failed(
        &git(&w, &["push", "origin", "main"], &[]),
        "push to a fetch-only source",
    );
    assert!(
        err.contains("remote: pushing is not allowed: source \"code\" is fetch-only"),
        "git should print the bridge's text: {err}"
    );
    let server_head = |s: &GitServer| {
        ok(
            &git(
                &s.repos_dir().join("team/lib.git"),
                &["rev-parse", "main"],
                &[],
            ),
            "server head",
        )
    };
    let before = server_head(&server);
    let local = ok(&git(&w, &["rev-parse", "HEAD"], &[]), "head");
    assert_ne!(before, local, "the refused push must not reach the server");
    assert!(
        !server.access_log().contains("git-receive-pack"),
        "the refusal happens at the bridge, before the server: {}",
        server.access_log()
    );
    // The clone's records came first; the refusal's follows them.
    let records = rig
        .bridge
        .audit_records_until("an audit record of the refused push", |r| {
            r["decision"] == "denied"
        })
        .await;
    let denied = records.iter().find(|r| r["decision"] == "denied").unwrap();
    assert_eq!(denied["rule"], "git: fetch only");
    assert_eq!(denied["status"], 403);
    // Two service parameters (git's http-backend heeds the last): refused, never read as the
    // first, fetch-only one.
    let two = rig
        .cloud
        .client()
        .get(format!(
            "{}/v1/bridges/dc1/git/code/team/lib.git/info/refs?service=git-upload-pack&service=git-receive-pack",
            rig.cloud.http
        ))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(two.status(), 403);
    assert!(
        two.text()
            .await
            .unwrap()
            .contains("send one service parameter")
    );

    let rw = clone_url(&rig, key, "code-rw", "team/lib.git");
    ok(
        &git(&w, &["push", &rw, "main"], &[]),
        "push with allow_push",
    );
    assert_eq!(server_head(&server), local);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_reachable_says_why() {
    let server = server();
    server.create_repo("team/lib.git", 1);
    server.create_repo("other/secret.git", 1);
    let rig = Rig::start_with(|_| sources(&server, GIT_TOKEN)).await;
    let work = tempfile::tempdir().unwrap();
    let key = rig.tenant.api_key.clone();

    // `repositories` limits the source: team/* with or without .git, nothing else.
    for repo in ["team/lib.git", "team/lib"] {
        let url = clone_url(&rig, &key, "team", repo);
        ok(&git(work.path(), &["ls-remote", &url], &[]), repo);
    }
    let err = failed(
        &git(
            work.path(),
            &[
                "ls-remote",
                &clone_url(&rig, &key, "team", "other/secret.git"),
            ],
            &[],
        ),
        "a repository outside repositories",
    );
    assert!(err.contains("404") || err.contains("not found"), "{err}");
    assert!(
        err.contains("has no repository \"other/secret.git\""),
        "{err}"
    );

    // An allow rule that admits git's first request but not the POST that follows is said on
    // the first, where git prints it.
    let err = failed(
        &git(
            work.path(),
            &[
                "ls-remote",
                &clone_url(&rig, &key, "narrow", "team/lib.git"),
            ],
            &[],
        ),
        "a rule for GET only",
    );
    assert!(
        err.contains("remote: POST /team/lib.git/git-upload-pack, which git sends after GET /team/lib.git/info/refs, matches no allow rule"),
        "{err}"
    );

    // An undeclared source is 404; another org's key finds no such bridge.
    let err = failed(
        &git(
            work.path(),
            &["ls-remote", &clone_url(&rig, &key, "nope", "team/lib.git")],
            &[],
        ),
        "an unknown source",
    );
    assert!(
        err.contains("declares no Git source named \"nope\"")
            && err.contains("it declares code, code-rw, narrow, team"),
        "{err}"
    );
    // Without a source, git's own `info/refs` is not taken for one; a server root without a
    // repository is told to name one.
    let host = rig.cloud.http.trim_start_matches("http://");
    let no_source = format!("http://x:{key}@{host}/v1/bridges/dc1/git");
    let err = failed(
        &git(work.path(), &["ls-remote", &no_source], &[]),
        "a URL without a source",
    );
    assert!(err.contains("remote: the URL names no Git source"), "{err}");
    let err = failed(
        &git(
            work.path(),
            &["ls-remote", &clone_url(&rig, &key, "team", "")],
            &[],
        ),
        "a server root without a repository",
    );
    assert!(
        err.contains("is a server root: name a repository after it (…/git/team/REPOSITORY)"),
        "{err}"
    );
    // The config's list name where the URL has the kind: git prints the right URL.
    let by_list_name = clone_url(&rig, &key, "team", "team/lib.git").replace("/git/", "/sources/");
    let err = failed(
        &git(work.path(), &["ls-remote", &by_list_name], &[]),
        "/sources/ for /git/",
    );
    assert!(
        err.contains("remote: a bridge's `sources` entries are reached at /v1/bridges/dc1/git/"),
        "{err}"
    );
    let other = rig.cloud.tenant("globex");
    let err = failed(
        &git(
            work.path(),
            &[
                "ls-remote",
                &clone_url(&rig, &other.api_key, "code", "team/lib.git"),
            ],
            &[],
        ),
        "another org's key",
    );
    assert!(
        err.contains("no bridge \"dc1\" in the org of this API key"),
        "{err}"
    );

    // No key at all: a Basic challenge, so git asks (here: cannot ask, and says so).
    let anonymous = format!("{}/v1/bridges/dc1/git/code/team/lib.git", rig.cloud.http);
    let response = rig
        .cloud
        .client()
        .get(format!("{anonymous}/info/refs?service=git-upload-pack"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Basic realm=\"signals\""
    );
    failed(
        &git(work.path(), &["ls-remote", &anonymous], &[]),
        "no credentials",
    );

    // A known bridge without a live tunnel is 503, not 404.
    rig.cloud
        .admin(&["bridge-token", "create", "--org", "acme", "--name", "dc2"]);
    let response = rig
        .cloud
        .client()
        .get(format!(
            "{}/v1/bridges/dc2/git/code/team/lib.git/info/refs?service=git-upload-pack",
            rig.cloud.http
        ))
        .basic_auth("x", Some(&key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );

    // Traversal and encoded slashes are refused at the bridge, before the server. Sent raw:
    // clients (reqwest, git) would remove the dot segments themselves.
    for path in [
        "team/lib.git/../../other/secret.git/info/refs",
        "team/%2e%2e/other/secret.git/info/refs",
        "team%2F..%2Fother/secret.git/info/refs",
    ] {
        let target = format!("/v1/bridges/dc1/git/code/{path}?service=git-upload-pack");
        assert_eq!(raw_get(&rig, &target, &key).await, 400, "{path}");
    }
    // Dumb-HTTP paths are not Git's smart protocol and do not pass.
    let response = rig
        .cloud
        .client()
        .get(format!("{anonymous}/HEAD"))
        .basic_auth("x", Some(&key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(
        !server.access_log().contains("secret.git"),
        "{}",
        server.access_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_source_token_is_a_clear_error_for_git_and_bridge_check() {
    let server = server();
    server.create_repo("team/lib.git", 1);
    let rig = Rig::start_with(|_| sources(&server, "wrong-token")).await;
    let work = tempfile::tempdir().unwrap();
    let url = clone_url(&rig, &rig.tenant.api_key, "code", "team/lib.git");
    let err = failed(
        &git(work.path(), &["clone", &url, "x"], &[]),
        "clone with a wrong source token",
    );
    assert!(
        err.contains("rejected the credentials in the entry's auth") && err.contains("502"),
        "{err}"
    );

    // `bridge check` names the failing source and exits 1.
    let yaml = format!(
        "{}token: unused\n{}",
        yaml_for(&rig.cloud, "dc1", ""),
        sources(&server, "wrong-token").replace(
            "repositories: [\"team/*\"]",
            "repositories: [\"team/lib.git\"]"
        )
    );
    let (code, team) = check_team_row(yaml);
    assert_eq!(code, Some(1), "{team}");
    assert!(team.contains("team/lib.git/info/refs"), "{team}");
    assert!(
        team.contains("FAILED: credentials rejected (HTTP 401): check sources[].auth"),
        "{team}"
    );

    // The right token, but the entry names a repository the server does not have: the
    // source's URL or its list is wrong, and `bridge check` says so rather than "ok (HTTP 404)".
    let yaml = format!(
        "{}token: unused\n{}",
        yaml_for(&rig.cloud, "dc1", ""),
        sources(&server, GIT_TOKEN).replace(
            "repositories: [\"team/*\"]",
            "repositories: [\"team/gone.git\"]"
        )
    );
    let (code, team) = check_team_row(yaml);
    assert_eq!(code, Some(1), "{team}");
    assert!(
        team.contains("FAILED: no repository \"team/gone.git\" on the server")
            && team.contains("(HTTP 404)"),
        "{team}"
    );
    // Globs only: nothing to fetch, and the row says what its "ok" rests on.
    let yaml = format!(
        "{}token: unused\n{}",
        yaml_for(&rig.cloud, "dc1", ""),
        sources(&server, GIT_TOKEN)
    );
    let (_, team) = check_team_row(yaml);
    assert!(
        team.contains("ok (HTTP") && team.contains("taken as a server root: name a repository"),
        "{team}"
    );
}

/// Runs `bridge check` on `yaml`: its exit code and its row for the source `team`.
fn check_team_row(yaml: String) -> (Option<i32>, String) {
    check_row(yaml, "team")
}

/// Runs `bridge check` on `yaml`: its exit code and its row for the source `source`.
fn check_row(yaml: String, source: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env_remove("SERVICE_BRIDGE_TOKEN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("git") && l.contains(&format!(" {source} ")))
        .unwrap_or_else(|| panic!("no row for {source} in: {text}"))
        .to_string();
    (out.status.code(), row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_sources_and_anonymous_servers() {
    let bearer = GitServer::start(GitAuth::Bearer("SECRET-bearer".into()));
    bearer.create_repo("app.git", 2);
    let anonymous = GitServer::start(GitAuth::None);
    anonymous.create_repo("pub.git", 1);
    let listed = format!(
        "sources:\n  - {{name: b, url: {}, auth: {{type: bearer, token: SECRET-bearer}}}}\n  - {{name: anon, url: {}}}\n  - {{name: one, url: {}/pub.git}}\n",
        bearer.url(),
        anonymous.url(),
        anonymous.url().trim_end_matches('/')
    );
    let rig = Rig::start_with({
        let listed = listed.clone();
        move |_| listed
    })
    .await;
    let work = tempfile::tempdir().unwrap();
    ok(
        &git(
            work.path(),
            &[
                "clone",
                &clone_url(&rig, &rig.tenant.api_key, "b", "app.git"),
                "b",
            ],
            &[],
        ),
        "bearer source",
    );
    assert_eq!(count_commits(&work.path().join("b")), 2);
    ok(
        &git(
            work.path(),
            &[
                "clone",
                &clone_url(&rig, &rig.tenant.api_key, "anon", "pub.git"),
                "a",
            ],
            &[],
        ),
        "anonymous source",
    );
    // A repository the server moved is followed through the tunnel; a move to another host
    // fails without naming it.
    let out = git(
        work.path(),
        &[
            "clone",
            &clone_url(&rig, &rig.tenant.api_key, "anon", "moved/pub.git"),
            "moved",
        ],
        &[],
    );
    ok(&out, "a moved repository");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let server_address = anonymous
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    assert!(
        stderr.contains("redirecting to")
            && stderr.contains("/v1/bridges/dc1/git/anon/pub.git")
            && !stderr.contains(&server_address),
        "{stderr}"
    );
    let out = git(
        work.path(),
        &[
            "clone",
            &clone_url(&rig, &rig.tenant.api_key, "anon", "away/pub.git"),
            "away",
        ],
        &[],
    );
    let stderr = failed(&out, "a repository moved to another host");
    assert!(!stderr.contains("git.internal.example"), "{stderr}");
    assert!(
        stderr.contains("remote: the Git server of source \"anon\" redirected this request outside the source's url"),
        "{stderr}"
    );
    assert_secret_absent(&rig, "SECRET-bearer").await;

    // A source whose url is one repository is cloned by the source's own URL.
    let out = git(
        work.path(),
        &[
            "clone",
            &clone_url(&rig, &rig.tenant.api_key, "one", ""),
            "one",
        ],
        &[],
    );
    ok(&out, "a source whose url is one repository");
    assert_eq!(count_commits(&work.path().join("one")), 1);
    // Its repository's path after it, as under a server root: git shows why nothing is there.
    let out = git(
        work.path(),
        &[
            "ls-remote",
            &clone_url(&rig, &rig.tenant.api_key, "one", "away/pub.git"),
        ],
        &[],
    );
    let stderr = failed(&out, "a path under a source that is one repository");
    assert!(
        stderr.contains("remote: source \"one\" is one repository (its url ends in .git): clone …/git/one itself"),
        "{stderr}"
    );
    let yaml = format!("{}token: unused\n{listed}", yaml_for(&rig.cloud, "dc1", ""));
    let (_, row) = check_row(yaml, "one");
    assert!(
        row.contains(
            "ok (HTTP 200, a Git repository): the url is one, cloned as /v1/bridges/dc1/git/one"
        ),
        "{row}"
    );
    // A repository's url with a typo: a failure, not an "ok" for a server root.
    let typo = listed.replace("/pub.git}", "/pbu.git}");
    let (code, row) = check_row(
        format!("{}token: unused\n{typo}", yaml_for(&rig.cloud, "dc1", "")),
        "one",
    );
    assert_eq!(code, Some(1), "{row}");
    assert!(
        row.contains("FAILED: no Git repository at the url"),
        "{row}"
    );
    // A url that answers 200, but as an HTTP API does, not with Git's refs: no repository.
    let api = format!(
        "sources:\n  - {{name: one, url: {}/repo.git, auth: {{type: basic, username: svc, password: {}}}}}\n",
        rig.upstream.url.trim_end_matches('/'),
        testkit::bridge::INTERNAL_PASSWORD
    );
    let (code, row) = check_row(
        format!("{}token: unused\n{api}", yaml_for(&rig.cloud, "dc1", "")),
        "one",
    );
    assert_eq!(code, Some(1), "{row}");
    assert!(
        row.contains("FAILED: HTTP 200 but no Git repository's answer"),
        "{row}"
    );
}

/// The status of a GET sent byte for byte as written, over plain HTTP/1.1.
async fn raw_get(rig: &Rig, target: &str, key: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = rig.cloud.http.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text}"))
}

/// `secret` is in no log line of either process, no audit record and no metric.
async fn assert_secret_absent(rig: &Rig, secret: &str) {
    assert!(!rig.bridge.log_text().contains(secret), "bridge log");
    assert!(!rig.cloud.log_text().contains(secret), "cloud log");
    assert!(
        !rig.bridge.metrics().await.contains(secret),
        "bridge metrics"
    );
    let cloud_metrics = rig.cloud.metrics_text().await;
    assert!(!cloud_metrics.contains(secret), "cloud metrics");
    let records: Vec<Value> = rig.bridge.audit_records(1).await;
    assert!(!records.iter().any(|r| r.to_string().contains(secret)));
}
