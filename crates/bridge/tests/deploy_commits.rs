//! What changed in a deploy: the cloud lists a deployment's commits as a Git client of its own
//! relay, through the real `bridge`, from a real Git server (nginx + fcgiwrap +
//! `git http-backend`, with its own authentication), mapped through the API.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use testkit::Backend;
use testkit::bridge::Rig;
use testkit::dashboard;
use testkit::git_server::{GitAuth, GitServer};

const GIT_TOKEN: &str = "ghs-SECRET-commits-token";

fn deployment(sha: &str, at: DateTime<Utc>) -> Value {
    json!({
        "type": "deployment", "service": "api", "environment": "production",
        "repository": "acme/api", "sha": sha, "status": "success",
        "timestamp": at.to_rfc3339(),
    })
}

async fn get(rig: &Rig, key: &str, path: &str) -> (u16, Value) {
    let res = rig
        .cloud
        .client()
        .get(format!("{}{path}", rig.cloud.http))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn put_mapping(rig: &Rig, body: &Value) -> (u16, Value) {
    let res = rig
        .cloud
        .client()
        .put(format!("{}/v1/repository-sources", rig.cloud.http))
        .bearer_auth(&rig.tenant.api_key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn subjects(answer: &Value) -> Vec<&str> {
    answer["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["subject"].as_str().unwrap())
        .collect()
}

testkit::on_both_backends!(a_deployments_commits_come_through_the_bridge_and_feed_lead_time);

async fn a_deployments_commits_come_through_the_bridge_and_feed_lead_time(backend: Backend) {
    let server = GitServer::start(GitAuth::Basic {
        user: "x-access-token".into(),
        password: GIT_TOKEN.into(),
    });
    server.create_repo("acme/api.git", 2);
    let first_sha = server.commit("acme/api.git", "first-deploy.txt", "one\n");
    let url = server.url();
    let mut rig = Rig::start_full(backend, &[], |_| {
        format!("sources:\n  - {{type: git, name: code, url: {url}, auth: {{type: token, token: {GIT_TOKEN}}}}}\n  - {{type: git, name: narrow, url: {url}, auth: {{type: token, token: {GIT_TOKEN}}}, repositories: [\"acme/*\"], allow: [{{method: GET, path: \"/team/*\"}}]}}\n  - {{type: git, name: single, url: {url}/acme/api.git, auth: {{type: token, token: {GIT_TOKEN}}}}}\n")
    })
    .await;
    let key = rig.tenant.api_key.clone();
    let first = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&first_sha, Utc::now()))
        .await;
    server.commit("acme/api.git", "payments/charge.rs", "fn charge() {}\n");
    let second_sha = server.commit("acme/api.git", "README.md", "# api\n");
    let second = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&second_sha, Utc::now()))
        .await;

    // Until the repository is mapped, the answer says how to map it.
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("PUT /v1/repository-sources"),
        "{problem}"
    );
    // A deployment without one of repository and sha is told which (a day back, so that it
    // supersedes none of the others).
    let mut no_sha = deployment(&second_sha, Utc::now() - chrono::Duration::days(1));
    no_sha.as_object_mut().unwrap().remove("sha");
    let no_sha = rig.cloud.post_event(&rig.tenant, &no_sha).await;
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{no_sha}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("names no sha;"),
        "{problem}"
    );

    // A bad mapping names each bad field.
    let (status, problem) = put_mapping(
        &rig,
        &json!({"repository": "acme/api", "bridge": "DC 1", "source": "code", "path": "../etc"}),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/bridge", "/path"], "{problem}");

    let mapping = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"});
    let (status, answer) = put_mapping(&rig, &mapping).await;
    assert_eq!(status, 200, "{answer}");
    let (_, listed) = get(&rig, &key, "/v1/repository-sources").await;
    assert_eq!(listed["repositorySources"], json!([mapping]));

    // Mapped, the deployments are listed without anyone asking: the change lead time of the
    // second counts from the oldest commit it brought. The first has no previous deployment,
    // so its whole history is listed, which dates nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let dora = loop {
        let (_, dora) = get(&rig, &key, "/v1/dora?service=api").await;
        if dora["changeLeadTimeSeconds"]["count"] == 1 || std::time::Instant::now() > deadline {
            break dora;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The two commits since the previous deployment, newest first, with the files they touched.
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        subjects(&answer),
        ["README.md", "payments/charge.rs"],
        "{answer}"
    );
    assert_eq!(answer["commits"][0]["sha"], second_sha.as_str());
    assert_eq!(answer["commits"][1]["files"], json!(["payments/charge.rs"]));
    assert_eq!(answer["previous"]["sha"], first_sha.as_str());
    assert_eq!(answer["truncated"], false);
    assert_eq!(answer["wholeHistory"], false);
    assert!(
        rig.cloud.data_dir.path().join("git-mirrors").is_dir(),
        "the mirror is kept under the data dir"
    );

    let at = |t: &Value| DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap();
    let expected = (at(&answer["deployment"]["timestamp"]) - at(&answer["commits"][1]["time"]))
        .as_seconds_f64();
    let lead = &dora["changeLeadTimeSeconds"];
    assert_eq!(lead["count"], 1, "{dora}");
    assert!(
        (lead["p50"].as_f64().unwrap() - expected).abs() < 0.01,
        "{expected}: {dora}"
    );
    let (_, first_answer) = get(&rig, &key, &format!("/v1/deployments/{first}/commits")).await;
    assert_eq!(first_answer["previous"], Value::Null, "{first_answer}");
    assert_eq!(first_answer["wholeHistory"], true, "{first_answer}");
    assert_eq!(
        first_answer["commits"].as_array().unwrap().len(),
        3,
        "{first_answer}"
    );

    // The deployment's page lists them; admins map repositories on the dashboard too.
    let web = dashboard::client(&rig.cloud);
    let admin = dashboard::session(&rig.cloud, &web, "acme", "ada@acme.test", "admin").await;
    let member = dashboard::session(&rig.cloud, &web, "acme", "bob@acme.test", "member").await;
    let page_of = |id: &str| format!("{}/events/{id}", rig.cloud.https);
    let (status, page) = dashboard::get(&web, page_of(&second), &member).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("payments/charge.rs") && page.contains(&second_sha[..12]),
        "{page}"
    );
    assert!(page.contains("since the previous one"), "{page}");
    // The first has none: its page says the list is the whole history.
    let (status, page) = dashboard::get(&web, page_of(&first), &member).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("so this is the whole history up to its commit")
            && !page.contains("since the previous one"),
        "{page}"
    );
    let form = [
        ("repository", "acme/api"),
        ("bridge", "dc1"),
        ("source", "code"),
        ("path", "/acme/api.git"),
    ];
    let action = "/integrations/repositories";
    let (status, _) = dashboard::post(&web, &rig.cloud, &member, action, &form).await;
    assert_eq!(status, 403, "members do not map repositories");
    let bad = [
        ("repository", "acme/api"),
        ("bridge", "DC 1"),
        ("source", "code"),
        ("path", "x"),
    ];
    let (status, page) = dashboard::post(&web, &rig.cloud, &admin, action, &bad).await;
    assert_eq!(status, 422);
    assert!(page.contains("bridge: expected"), "{page}");
    let typo = [
        ("repository", "acme/api"),
        ("bridge", "dc1"),
        ("source", "cdoe"),
        ("path", "acme/api.git"),
    ];
    let (status, page) = dashboard::post(&web, &rig.cloud, &admin, action, &typo).await;
    assert_eq!(status, 422);
    assert!(
        page.contains("declares the Git sources code, narrow, single, not &#34;cdoe&#34;"),
        "{page}"
    );
    let outside = [
        ("repository", "acme/api"),
        ("bridge", "dc1"),
        ("source", "narrow"),
        ("path", "other/api.git"),
    ];
    let (status, page) = dashboard::post(&web, &rig.cloud, &admin, action, &outside).await;
    assert_eq!(status, 422);
    assert!(
        page.contains("path: bridge &#34;dc1&#34;&#39;s Git source &#34;narrow&#34; reaches only the repositories acme/*"),
        "{page}"
    );
    let (status, _) = dashboard::post(&web, &rig.cloud, &admin, action, &form).await;
    assert_eq!(status, 303);
    let (_, page) = dashboard::get(&web, format!("{}{action}", rig.cloud.https), &member).await;
    assert!(page.contains("acme/api.git"), "{page}");
    let (_, audit) = dashboard::get(&web, format!("{}/audit", rig.cloud.https), &admin).await;
    assert!(audit.contains("repository_source.set"), "{audit}");
    assert!(
        audit.contains("sigapi_"),
        "the API key that mapped it: {audit}"
    );
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(
        status, 200,
        "listed again through the new mapping: {answer}"
    );

    // An alert after the deployment cites its commits among the reasons.
    let alert = rig
        .cloud
        .post_event(
            &rig.tenant,
            &json!({"type": "alert", "service": "api", "environment": "production",
                "status": "triggered", "severity": "critical", "title": "Charges fail",
                "timestamp": Utc::now().to_rfc3339()}),
        )
        .await;
    let (_, suspects) = get(&rig, &key, &format!("/v1/alerts/{alert}/suspects")).await;
    let reasons = &suspects["suspects"][0]["reasons"];
    assert_eq!(
        suspects["suspects"][0]["event"]["id"],
        second.as_str(),
        "{suspects}"
    );
    assert!(
        reasons
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r
                == "2 commits since the previous deployment, touching README.md and payments/"),
        "{suspects}"
    );

    // Another org's key sees no such deployment.
    let other = rig.cloud.tenant("globex");
    let (status, _) = get(
        &rig,
        &other.api_key,
        &format!("/v1/deployments/{second}/commits"),
    )
    .await;
    assert_eq!(status, 404);

    // A later deployment fetches incrementally into the same mirror.
    let third_sha = server.commit("acme/api.git", "payments/refund.rs", "fn refund() {}\n");
    let third = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&third_sha, Utc::now()))
        .await;
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{third}/commits")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(subjects(&answer), ["payments/refund.rs"]);

    // A made-up sha (the README's), and a mapping to a source the bridge does not declare:
    // the caller's data to fix, a 409 that says which, never a 5xx.
    let made_up = rig
        .cloud
        .post_event(&rig.tenant, &deployment("abc123def456", Utc::now()))
        .await;
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{made_up}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("commit abc123def456 is not in"), "{detail}");
    assert_eq!(
        problem["title"], "Does not match the repository",
        "{problem}"
    );
    // The next deployment's previous one names that commit, which the repository does not
    // hold (as after a rewritten history): its list is the whole history, and says so.
    let after_sha = server.commit("acme/api.git", "after-rewrite.txt", "x\n");
    let after = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&after_sha, Utc::now()))
        .await;
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{after}/commits")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["previous"]["sha"], "abc123def456", "{answer}");
    assert_eq!(answer["wholeHistory"], true, "{answer}");
    assert_eq!(answer["commits"][0]["sha"], after_sha.as_str(), "{answer}");
    assert!(
        subjects(&answer).contains(&"first-deploy.txt"),
        "the whole history: {answer}"
    );
    let (_, page) = dashboard::get(&web, page_of(&after), &member).await;
    assert!(
        page.contains("names a commit that is no longer in the repository")
            && !page.contains("since the previous one"),
        "{page}"
    );
    // A source the connected bridge does not declare is refused when mapped, naming those
    // it does; the mapping in place stays.
    let wrong = json!({"repository": "acme/api", "bridge": "dc1", "source": "nosuch", "path": "acme/api.git"});
    let (status, problem) = put_mapping(&rig, &wrong).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["pointer"], "/source", "{problem}");
    let detail = problem["errors"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("declares the Git sources code, narrow, single, not \"nosuch\""),
        "{detail}"
    );
    let (_, listed) = get(&rig, &key, "/v1/repository-sources").await;
    assert_eq!(listed["repositorySources"][0]["source"], "code", "{listed}");
    // A path outside the source's `repositories` (announced by the bridge) is refused when
    // mapped, naming the globs; the mapping in place stays.
    let outside = json!({"repository": "acme/api", "bridge": "dc1", "source": "narrow", "path": "other/api.git"});
    let (status, problem) = put_mapping(&rig, &outside).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["pointer"], "/path", "{problem}");
    let detail = problem["errors"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("Git source \"narrow\" reaches only the repositories acme/*")
            && detail.contains("\"other/api.git\" is none of them"),
        "{detail}"
    );
    let (_, listed) = get(&rig, &key, "/v1/repository-sources").await;
    assert_eq!(listed["repositorySources"][0]["source"], "code", "{listed}");
    // A source whose allow rules refuse the path: the bridge's own reason, not a bare 403.
    let narrow = json!({"repository": "acme/api", "bridge": "dc1", "source": "narrow", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &narrow).await.0, 200);
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{made_up}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("refuses \"acme/api.git\" through source \"narrow\"")
            && detail.contains("matches no allow rule"),
        "{detail}"
    );
    // A path under a one-repository source: the bridge's refusal, said as the bridge's (the
    // repository is there), not as a repository the Git server lacks.
    let single = json!({"repository": "acme/api", "bridge": "dc1", "source": "single", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &single).await.0, 200);
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{made_up}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("does not serve \"acme/api.git\" through source \"single\"")
            && detail.contains("is one repository"),
        "{detail}"
    );
    // A path the Git server does not have: said as the server's, not as the bridge's sources.
    let missing = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/nope.git"});
    assert_eq!(put_mapping(&rig, &missing).await.0, 200);
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{made_up}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("has no repository \"acme/nope.git\""),
        "{detail}"
    );
    // Mapped back, the listings (which a new mapping drops) are read again.
    assert_eq!(put_mapping(&rig, &mapping).await.0, 200);
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(status, 200, "{answer}");

    // Without the bridge, commits listed before are still answered; new ones are a clear 503.
    rig.bridge.signal("TERM");
    rig.bridge.wait();
    let fourth_sha = server.commit("acme/api.git", "late.txt", "late\n");
    let fourth = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&fourth_sha, Utc::now()))
        .await;
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(subjects(&answer).len(), 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (status, problem) = loop {
        let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{fourth}/commits")).await;
        if status != 200 || std::time::Instant::now() > deadline {
            break (status, problem);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 503, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("dc1"),
        "{problem}"
    );
    // Its tokens revoked, starting it again cannot help: a 409 that says what to do.
    rig.cloud
        .admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"]);
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{fourth}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail
            .contains("bridge \"dc1\", whose tokens are all revoked; give the bridge a new token"),
        "{detail}"
    );

    // Mapped to a bridge the org never had: a 409 that says so (the relay's 404 alone would
    // read as a missing source).
    let nowhere = json!({"repository": "acme/api", "bridge": "nowhere", "source": "code", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &nowhere).await.0, 200);
    let (status, problem) = get(&rig, &key, &format!("/v1/deployments/{fourth}/commits")).await;
    assert_eq!(status, 409, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"nowhere\"") && detail.contains("no token"),
        "{detail}"
    );

    // A mapping removed is gone; removing it again is a 404. The name is read without the
    // blanks around it, as a mapping is stored.
    for want in [204, 404] {
        let res = rig
            .cloud
            .client()
            .delete(format!(
                "{}/v1/repository-sources?repository=%20acme/api%20",
                rig.cloud.http
            ))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), want);
    }
    let (status, _) = get(&rig, &key, &format!("/v1/deployments/{second}/commits")).await;
    assert_eq!(status, 409);

    // Neither the source's token nor the cloud's internal key is written anywhere.
    let logs = rig.cloud.log_text() + &rig.bridge.log_text();
    assert!(!logs.contains(GIT_TOKEN));
    assert!(!logs.contains("sigint_"));
}

/// One org whose Git server never answers holds up only its own listings: another org's
/// deployments are listed meanwhile, without anyone asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_git_server_holds_up_only_its_own_org() {
    // Connections complete in the accept queue and are never read: every fetch waits for an
    // answer until the cloud's --forward-timeout (120 s).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/", silent.local_addr().unwrap());
    let rig = Rig::start_full(Backend::Sqlite, &[], |_| {
        format!("sources:\n  - {{type: git, name: code, url: {silent_url}}}\n")
    })
    .await;
    rig.cloud
        .post_event(&rig.tenant, &deployment(&"a".repeat(40), Utc::now()))
        .await;
    let mapping = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &mapping).await.0, 200);

    // A second org (listed after the first: its id is higher), with a Git server that answers.
    let server = GitServer::start(GitAuth::None);
    server.create_repo("acme/api.git", 1);
    let first_sha = server.commit("acme/api.git", "one.txt", "one\n");
    let second_sha = server.commit("acme/api.git", "two.txt", "two\n");
    let globex = rig.cloud.tenant("globex");
    let token = rig
        .cloud
        .admin(&["bridge-token", "create", "--org", "globex", "--name", "dc2"]);
    let yaml = testkit::bridge::yaml_for(
        &rig.cloud,
        "dc2",
        &format!(
            "sources:\n  - {{type: git, name: code, url: {}}}\n",
            server.url()
        ),
    );
    let _bridge = testkit::bridge::start_connected(&yaml, &token).await;
    let earlier = Utc::now() - chrono::Duration::minutes(5);
    rig.cloud
        .post_event(&globex, &deployment(&first_sha, earlier))
        .await;
    rig.cloud
        .post_event(&globex, &deployment(&second_sha, Utc::now()))
        .await;
    let res = rig
        .cloud
        .client()
        .put(format!("{}/v1/repository-sources", rig.cloud.http))
        .bearer_auth(&globex.api_key)
        .json(&json!({"repository": "acme/api", "bridge": "dc2", "source": "code", "path": "acme/api.git"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);

    // Listed while acme's fetch still waits: well within the 120 s it will wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, dora) = get(&rig, &globex.api_key, "/v1/dora?service=api").await;
        if dora["changeLeadTimeSeconds"]["count"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "globex's deployments were not listed while acme's Git server was silent: {dora}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(silent);
}

/// A shutdown waits one `--drain-timeout` in all, as docs/operations.md says, also while a
/// commit listing started by a public request still waits on the Git server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_in_flight_is_cut_within_one_drain_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/", silent.local_addr().unwrap());
    let (reached, reaches) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Held, never answered.
        let mut held = Vec::new();
        for tcp in silent.incoming().flatten() {
            held.push(tcp);
            let _ = reached.send(());
        }
    });
    let mut rig = Rig::start_full(Backend::Sqlite, &["--drain-timeout", "5"], |_| {
        format!("sources:\n  - {{type: git, name: code, url: {silent_url}}}\n")
    })
    .await;
    let id = rig
        .cloud
        .post_event(&rig.tenant, &deployment(&"b".repeat(40), Utc::now()))
        .await;
    let mapping = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &mapping).await.0, 200);
    let asking = tokio::spawn({
        let (client, url, key) = (
            rig.cloud.client(),
            format!("{}/v1/deployments/{id}/commits", rig.cloud.http),
            rig.tenant.api_key.clone(),
        );
        async move { client.get(url).bearer_auth(key).send().await }
    });
    tokio::task::spawn_blocking(move || reaches.recv_timeout(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the fetch reaches the Git server");

    let signalled = std::time::Instant::now();
    rig.cloud.signal("TERM");
    assert_eq!(rig.cloud.wait(), Some(0));
    let took = signalled.elapsed();
    // Two drains would be 10 s and more.
    assert!(
        took < Duration::from_secs(9),
        "stopped {took:?} after SIGTERM with --drain-timeout 5"
    );
    asking.abort();
}

/// A deployment sent late, between two listed ones, splits the later one's commits: the next
/// round lists it again from the late one, and the suspects' reason counts what it brought.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_deployment_between_two_lists_the_later_one_again() {
    let server = GitServer::start(GitAuth::None);
    server.create_repo("acme/api.git", 1);
    let url = server.url();
    let rig = Rig::start_full(Backend::Sqlite, &[], |_| {
        format!("sources:\n  - {{type: git, name: code, url: {url}}}\n")
    })
    .await;
    let key = rig.tenant.api_key.clone();
    let now = Utc::now();
    let first_sha = server.commit("acme/api.git", "one.txt", "one\n");
    let middle_sha = server.commit("acme/api.git", "two.txt", "two\n");
    let last_sha = server.commit("acme/api.git", "three.txt", "three\n");
    rig.cloud
        .post_event(
            &rig.tenant,
            &deployment(&first_sha, now - chrono::Duration::minutes(30)),
        )
        .await;
    let last = rig
        .cloud
        .post_event(
            &rig.tenant,
            &deployment(&last_sha, now - chrono::Duration::minutes(10)),
        )
        .await;
    let mapping = json!({"repository": "acme/api", "bridge": "dc1", "source": "code", "path": "acme/api.git"});
    assert_eq!(put_mapping(&rig, &mapping).await.0, 200);
    let (status, answer) = get(&rig, &key, &format!("/v1/deployments/{last}/commits")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(subjects(&answer), ["three.txt", "two.txt"]);

    rig.cloud
        .post_event(
            &rig.tenant,
            &deployment(&middle_sha, now - chrono::Duration::minutes(20)),
        )
        .await;
    let alert = rig
        .cloud
        .post_event(
            &rig.tenant,
            &json!({"type": "alert", "service": "api", "environment": "production",
                "status": "triggered", "severity": "critical", "title": "Errors",
                "timestamp": now.to_rfc3339()}),
        )
        .await;
    // Any change of the org's mappings starts a round at once (rounds also come every
    // minute); writing this repository's mapping again would list it again anyway.
    let other = json!({"repository": "acme/other", "bridge": "dc1", "source": "code", "path": "acme/other.git"});
    assert_eq!(put_mapping(&rig, &other).await.0, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, suspects) = get(&rig, &key, &format!("/v1/alerts/{alert}/suspects")).await;
        assert_eq!(suspects["suspects"][0]["event"]["id"], last.as_str());
        let reasons = suspects["suspects"][0]["reasons"].to_string();
        if reasons.contains("1 commit since the previous deployment, touching three.txt") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the later deployment was not listed again from the late one: {suspects}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
