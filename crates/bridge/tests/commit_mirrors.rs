//! The disk the cloud's commit mirrors take: commits and trees only, never file contents (a
//! Git server that cannot leave them out is refused before it sends them), and a mirror is
//! deleted with the last mapping that reads its repository.

use std::path::Path;

use chrono::Utc;
use serde_json::{Value, json};
use testkit::Backend;
use testkit::bridge::Rig;
use testkit::git_server::{GitAuth, GitServer};

/// The mirrors (`*.git` directories) under the cloud's data directory.
fn mirrors(data_dir: &Path) -> Vec<String> {
    let root = data_dir.join("git-mirrors");
    let Ok(orgs) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    orgs.flatten()
        .flat_map(|org| {
            std::fs::read_dir(org.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|m| m.file_name().to_string_lossy().into_owned())
        // A clone in progress (`….partial-PID`) is not a mirror yet.
        .filter(|name| name.ends_with(".git"))
        .collect()
}

async fn call(rig: &Rig, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = rig
        .cloud
        .client()
        .request(method, format!("{}{path}", rig.cloud.http))
        .bearer_auth(&rig.tenant.api_key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_hold_no_file_contents_and_leave_with_their_mapping() {
    let server = GitServer::start(GitAuth::None);
    server.create_repo("team/lib.git", 1);
    let sha = server.commit("team/lib.git", "lib.rs", "fn lib() {}\n");
    let plain = server.create_repo("team/plain.git", 1);
    let plain_sha = server.commit("team/plain.git", "big.bin", "contents\n");
    let status = std::process::Command::new("git")
        .args(["config", "uploadpack.allowFilter", "false"])
        .current_dir(&plain)
        .status()
        .unwrap();
    assert!(status.success());
    let url = server.url();
    let rig = Rig::start_full(Backend::Sqlite, &[], |_| {
        format!("sources:\n  - {{type: git, name: code, url: {url}}}\n")
    })
    .await;
    let deployment = |repository: &str, sha: &str| {
        json!({"type": "deployment", "service": "api", "environment": "production",
            "repository": repository, "sha": sha, "status": "success",
            "timestamp": Utc::now().to_rfc3339()})
    };
    let map = |repository: &str, path: &str| json!({"repository": repository, "bridge": "dc1", "source": "code", "path": path});

    // A server without partial clones would send every file: refused, and nothing is kept.
    call(
        &rig,
        reqwest::Method::PUT,
        "/v1/repository-sources",
        Some(map("acme/plain", "team/plain.git")),
    )
    .await;
    let id = rig
        .cloud
        .post_event(&rig.tenant, &deployment("acme/plain", &plain_sha))
        .await;
    let (status, problem) = call(
        &rig,
        reqwest::Method::GET,
        &format!("/v1/deployments/{id}/commits"),
        None,
    )
    .await;
    assert_eq!(status, 502, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("uploadpack.allowFilter true"),
        "{problem}"
    );
    assert_eq!(mirrors(rig.cloud.data_dir.path()), Vec::<String>::new());
    // The cloud's operator reads whose repository failed, and where.
    testkit::wait_until("the failure in the cloud's log", || {
        rig.cloud.log_text().lines().any(|line| {
            line.contains("cannot list a deployment's commits")
                && line.contains("\"repository\":\"acme/plain\"")
                && line.contains("\"path\":\"team/plain.git\"")
                && line.contains("\"org_id\":")
        })
    })
    .await;

    // Two mappings reading one repository share a mirror; it leaves with the last of them.
    for repository in ["acme/lib", "acme/lib-again"] {
        let (status, _) = call(
            &rig,
            reqwest::Method::PUT,
            "/v1/repository-sources",
            Some(map(repository, "team/lib.git")),
        )
        .await;
        assert_eq!(status, 200);
    }
    let id = rig
        .cloud
        .post_event(&rig.tenant, &deployment("acme/lib", &sha))
        .await;
    let (status, answer) = call(
        &rig,
        reqwest::Method::GET,
        &format!("/v1/deployments/{id}/commits"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(mirrors(rig.cloud.data_dir.path()).len(), 1);
    let (status, _) = call(
        &rig,
        reqwest::Method::DELETE,
        "/v1/repository-sources?repository=acme/lib",
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(
        mirrors(rig.cloud.data_dir.path()).len(),
        1,
        "acme/lib-again still reads it"
    );
    // Re-pointing the last mapping elsewhere forgets the old mirror too.
    let (status, _) = call(
        &rig,
        reqwest::Method::PUT,
        "/v1/repository-sources",
        Some(map("acme/lib-again", "team/plain.git")),
    )
    .await;
    assert_eq!(status, 200);
    testkit::wait_until("the unmapped repository's mirror is deleted", || {
        mirrors(rig.cloud.data_dir.path()).is_empty()
    })
    .await;
}
