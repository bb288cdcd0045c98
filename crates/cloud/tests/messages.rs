//! What a newcomer reads: help texts, error messages and logs say each thing once and only
//! where it applies. Real `cloud` binary.

use std::process::Command;

use testkit::{Backend, Cloud, cloud_bin};

#[test]
fn signal_key_help_does_not_speak_of_api_keys() {
    for args in [["signal-key", "-h"], ["signal-key", "create"]] {
        let out = Command::new(cloud_bin())
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(!text.contains("API key"), "{args:?}: {text}");
    }
    let out = Command::new(cloud_bin())
        .args(["api-key", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("shown once"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_query_parameter_lists_the_known_ones_once() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let detail = |path: &'static str| {
        let (cloud, key) = (&cloud, &t.api_key);
        async move {
            let res = cloud
                .client()
                .get(format!("{}{path}", cloud.http))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 400, "{path}");
            let problem: serde_json::Value = res.json().await.unwrap();
            problem["detail"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(
        detail("/v1/events?colour=red").await,
        "unknown query parameter \"colour\"; known parameters: type, service, environment, since, until, limit, cursor"
    );
    assert_eq!(
        detail("/v1/dora?svc=api").await,
        "unknown query parameter \"svc\"; known parameters: service, environment, since, until"
    );
    let res = cloud
        .client()
        .delete(format!("{}/v1/repository-sources", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let problem: serde_json::Value = res.json().await.unwrap();
    assert_eq!(
        problem["detail"],
        "query parameter \"repository\" is required; known parameters: repository"
    );
    // An empty filter, and a `+` that reached the server as a space.
    assert!(
        detail("/v1/events?service=")
            .await
            .starts_with("query parameter service is empty")
    );
    let said = detail("/v1/events?since=2024-01-15T10:00:00+01:00").await;
    assert!(said.contains("send 2024-01-15T10:00:00%2B01:00"), "{said}");
    // DORA's filters are the events' own, and so are their mistakes.
    assert_eq!(
        detail("/v1/dora?environment=").await,
        "query parameter environment is empty; give an environment, or leave the parameter out for every environment"
    );
    let empty_window =
        "query parameter since must be before until (since is inclusive, until exclusive)";
    assert_eq!(
        detail("/v1/events?since=2024-02-01T00:00:00Z&until=2024-01-01T00:00:00Z").await,
        empty_window
    );
    assert_eq!(
        detail("/v1/dora?since=2024-02-01T00:00:00Z&until=2024-02-01T00:00:00Z").await,
        format!(
            "{empty_window}; to the microsecond, at which times are compared, both are 2024-02-01T00:00:00.000000Z"
        )
    );
    // Bounds apart only beyond the microsecond are equal where they are compared, and said so.
    assert_eq!(
        detail("/v1/events?since=2024-03-01T00:00:00.0000011Z&until=2024-03-01T00:00:00.0000019Z")
            .await,
        format!(
            "{empty_window}; to the microsecond, at which times are compared, both are 2024-03-01T00:00:00.000001Z"
        )
    );
    // DORA's `until` defaults to now, and the message says so.
    assert_eq!(
        detail("/v1/dora?since=2999-01-01T00:00:00Z").await,
        "query parameter since must be before until, which defaults to now: pass an until after since"
    );
    // And `since` defaults to 30 days before `until`, never before year 0.
    assert!(
        detail("/v1/dora?until=0000-01-01T00:00:00Z")
            .await
            .starts_with("query parameter until is at or before the start of year 0"),
    );
    // Routes without parameters refuse any, as the others refuse unknown ones.
    for (path, route) in [
        ("/v1/bridges?name=dc1", "/v1/bridges"),
        (
            "/v1/repository-sources?repository=a",
            "/v1/repository-sources",
        ),
        ("/v1/alerts/x/suspects?limit=3", "/v1/alerts/x/suspects"),
        ("/v1/events/x?pretty=1", "/v1/events/x"),
        (
            "/v1/deployments/x/commits?limit=3",
            "/v1/deployments/x/commits",
        ),
        (
            "/v1/services/api/dependencies?env=p",
            "/v1/services/api/dependencies",
        ),
    ] {
        let said = detail(path).await;
        assert!(
            said.contains(&format!("{route} takes no query parameters")),
            "{said}"
        );
    }
}

/// The routes that change state refuse a query, as the `GET` routes do, so that a parameter
/// meant for another route never passes silently; ingest alone ignores one (webhook senders
/// add their own) and stores the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_routes_refuse_a_query_and_ingest_ignores_one() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    let client = cloud.client();
    let writes = [
        client
            .put(format!("{}/v1/services/api/dependencies?dry_run=1", cloud.http))
            .json(&serde_json::json!({"dependencies": ["db"]})),
        client
            .put(format!("{}/v1/repository-sources?dry_run=1", cloud.http))
            .json(&serde_json::json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"})),
        client
            .post(format!("{}/v1/alerts/{}/cause?dry_run=1", cloud.http, uuid::Uuid::new_v4()))
            .json(&serde_json::json!({"deploymentId": uuid::Uuid::new_v4().to_string()})),
    ];
    for request in writes {
        let res = request.bearer_auth(&t.api_key).send().await.unwrap();
        let url = res.url().path().to_string();
        assert_eq!(res.status(), 400, "{url}");
        let problem: serde_json::Value = res.json().await.unwrap();
        assert_eq!(
            problem["detail"],
            format!("unknown query parameter \"dry_run\": {url} takes no query parameters")
        );
    }
    // Nothing was changed by them.
    let listed: serde_json::Value = client
        .get(format!("{}/v1/services/api/dependencies", cloud.http))
        .bearer_auth(&t.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["dependencies"], serde_json::json!([]));
    let res = client
        .post(format!(
            "{}/v1/signals/{}?source=grafana",
            cloud.http, t.signal_key
        ))
        .bearer_auth(&t.api_key)
        .json(&testkit::seed_event())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
}

/// A GET of `path` with the tenant's key that answers problem+json: its status and detail.
async fn problem_at(cloud: &Cloud, key: &str, path: &str) -> (u16, String) {
    let res = cloud
        .client()
        .get(format!("{}{path}", cloud.http))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "{path}"
    );
    let problem: serde_json::Value = res.json().await.unwrap();
    (status, problem["detail"].as_str().unwrap().to_string())
}

/// A path segment that is not UTF-8 is a 400 naming the path. A bridge name or resource kind
/// sent percent-encoded is matched as sent, so its 404 names it as sent: decoded, `%61pis`
/// read as the `apis` it was then told to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_path_segments_are_problems_naming_them_as_sent() {
    let cloud = Cloud::start(Backend::Sqlite);
    let t = cloud.tenant("acme");
    for path in [
        "/v1/events/%FF",
        "/v1/alerts/%FF/suspects",
        "/v1/deployments/%FF/commits",
        "/v1/bridges/dc1/databases/%FF",
    ] {
        let (status, detail) = problem_at(&cloud, &t.api_key, path).await;
        assert_eq!(status, 400, "{path}");
        assert!(
            detail.contains(path) && detail.contains("UTF-8"),
            "{detail}"
        );
    }
    for (path, named) in [
        ("/v1/bridges/dc1/%FF/api/x", "\"%FF\""),
        ("/v1/bridges/dc1/%61pis/api/x", "\"%61pis\""),
        ("/v1/bridges/dc1%2Fapis/api/x", "\"dc1%2Fapis\""),
        ("/v1/bridges/dc1/sources/%FF", "`sources` entries"),
    ] {
        let (status, detail) = problem_at(&cloud, &t.api_key, path).await;
        assert_eq!(status, 404, "{path}");
        assert!(detail.contains(named), "{path}: {detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_admin_commands_log_no_server_notices() {
    let cloud = Cloud::start(Backend::Postgres);
    let out = cloud.admin_output(&["org", "create", "acme"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("already exists"), "{stderr}");
    assert!(
        stderr.trim().is_empty(),
        "admin commands should be quiet: {stderr}"
    );
}

#[test]
fn a_search_path_without_a_schema_is_named_once() {
    let base = testkit::pg_base_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3Dno_such_schema_here");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cloud_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
            "--database-url",
            &url,
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(2), "{all}");
    let said = all.matches("no schema of the search_path").count();
    assert_eq!(said, 1, "{all}");
    assert!(all.contains("\"no_such_schema_here\" exists"), "{all}");
    assert!(all.contains("CREATE SCHEMA"), "{all}");
    assert!(!all.contains("no schema has been selected"), "{all}");
}

/// The server's refusals are said in its words with the usual fix, and a server that is not
/// there is said as such (not as a pool that timed out).
#[test]
fn a_database_that_cannot_be_opened_says_why_and_what_to_do() {
    let base = testkit::pg_base_url();
    let (url, rest) = base.split_at(base.rfind('/').unwrap());
    let query = rest.find('?').map_or("", |i| &rest[i..]);
    let missing = format!("{url}/no_such_database_here{query}");
    let refused = "postgres://postgres@127.0.0.1:1/test".to_string();
    // A database that is not there is the operator's to fix (exit 2); a server that does not
    // answer may come back (exit 1).
    for (database_url, expected, code) in [
        (
            missing,
            "the database said: database \"no_such_database_here\" does not exist; create it",
            2,
        ),
        (refused, "Connection refused", 1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(cloud_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
            .args(["--database-url", &database_url])
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains(" at line "), "{stderr}");
    }
}

/// A data directory that cannot be made is the operator's to fix: exit 2 (a unit that restarts
/// on failure stops on it), naming --data-dir.
#[test]
fn a_data_dir_that_cannot_be_made_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = Command::new(cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(file.join("data"))
        .env_remove("CLOUD_DATABASE_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--data-dir"), "{stderr}");
}

/// A listen address that is a host name is refused as the other commands refuse it: what was
/// given, what is expected, and why (clap's own words say only "invalid socket address").
#[test]
fn a_host_name_to_listen_on_is_refused_with_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cloud_bin())
        .args(["serve", "--listen", "localhost:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"localhost:0\" is not an address and port, such as 127.0.0.1:8443"),
        "{stderr}"
    );
}

/// `serve` names every mistake in its options and the files they name at once, each with its
/// flag, and starts nothing: an operator fixes them in one go, not one per attempt.
#[test]
fn every_bad_serve_option_is_said_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let stderr = refused_serve(
        &[
            "--bridge-release",
            "banana",
            "--forward-timeout",
            "0",
            "--ingest-memory-mb",
            "-1",
            "--tls-cert",
            missing,
            "--tls-key",
            missing,
            "--client-ca",
            missing,
            "--data-dir",
            file.to_str().unwrap(),
        ],
        ("CLOUD_DRAIN_TIMEOUT", "soon"),
    );
    assert!(
        stderr.contains("7 problems with `cloud serve`'s options; nothing was started"),
        "{stderr}"
    );
    for said in [
        "--drain-timeout: \"soon\" is not a whole number from 0 to 86400",
        "--forward-timeout: \"0\" is not a whole number from 1 to 86400",
        "--ingest-memory-mb: \"-1\" is not a whole number from 1 to 65536",
        "--bridge-release: \"banana\" is not a release number",
        "--tls-cert/--tls-key: ",
        "--client-ca: ",
        "--data-dir ",
        "(the value of --drain-timeout comes from the environment variable CLOUD_DRAIN_TIMEOUT)",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
}

/// An open-file limit too low for storage and connections stops the start (exit 2), saying
/// what to raise, instead of a server that runs and answers nothing.
#[test]
fn an_open_file_limit_too_low_to_work_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("prlimit")
        .args(["--nofile=40:40", "--"])
        .arg(cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the open-file limit is 40, even raised to its hard limit; `cloud serve` needs at least 160"),
        "{stderr}"
    );
    assert!(stderr.contains("ulimit -Hn"), "{stderr}");
    assert!(
        !dir.path().join("signals.db").exists(),
        "refused before storage was touched"
    );
}

/// A metrics token that a scraper could not send, or that is short enough to guess, stops the
/// start, saying what to give.
#[test]
fn a_metrics_token_too_short_or_blank_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    for (token, said) in [
        (
            "secret",
            "CLOUD_METRICS_TOKEN: is 6 characters long; give 16 to 256",
        ),
        (
            "  ",
            "CLOUD_METRICS_TOKEN: is blank (empty or only whitespace)",
        ),
        (
            "0123456789abcdef 0123",
            "CLOUD_METRICS_TOKEN: holds a character other than visible ASCII",
        ),
    ] {
        let stderr = refused_serve(&["--data-dir", data_dir], ("CLOUD_METRICS_TOKEN", token));
        assert!(stderr.contains(said), "{token:?}: {stderr}");
    }
}

/// `cloud serve` on a loopback port of the kernel's choosing without the plain listener, with
/// `args` and the variable `env` set, which must refuse to start (exit 2); its stderr.
fn refused_serve(args: &[&str], env: (&str, &str)) -> String {
    let out = Command::new(cloud_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(args)
        .env(env.0, env.1)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

/// A switch's variable with a word it does not take lists the words it does.
#[test]
fn a_switch_variable_with_another_word_lists_those_taken() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let stderr = refused_serve(
        &["--data-dir", data_dir],
        ("CLOUD_WEBHOOK_ALLOW_PRIVATE", "maybe"),
    );
    assert!(
        stderr.contains("expected true or false (or 1/0, yes/no, on/off)"),
        "{stderr}"
    );
}

/// A `TOKIO_WORKER_THREADS` that is no number of threads is said, not ignored, and nothing is
/// started or written.
#[test]
fn a_worker_count_that_is_no_number_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    for bad in ["two", "0", ""] {
        let stderr = refused_serve(
            &["--data-dir", data_dir.to_str().unwrap()],
            ("TOKIO_WORKER_THREADS", bad),
        );
        assert!(
            stderr.contains(&format!(
                "TOKIO_WORKER_THREADS is {bad:?}: give a whole number"
            )),
            "{stderr}"
        );
    }
    assert!(!data_dir.exists(), "serve went on");
}
