//! Large batches sent at once by one org are all accepted: each takes its share of
//! `--ingest-memory-mb` whole once its body outgrows the first 64 KiB, so the org's half is
//! shared out in turn instead of being split between batches that then wait on each other
//! (which made four 1 MiB batches of one org all fail). Real `cloud`, default budget (4 MiB).

use reqwest::StatusCode;
use testkit::{Backend, Cloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_megabyte_batches_of_one_org_are_all_accepted() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--signal-rate-limit", "0"]);
    eight_batches_at_once(&cloud, cloud.client()).await;
}

/// The same on one HTTP/2 connection, where the batches waiting for their share keep what their
/// streams received in the connection's window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_megabyte_batches_on_one_http2_connection_are_all_accepted() {
    let cloud = Cloud::start_with(Backend::Sqlite, &["--signal-rate-limit", "0"]);
    testkit::install_crypto();
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    eight_batches_at_once(&cloud, h2).await;
}

async fn eight_batches_at_once(cloud: &Cloud, client: reqwest::Client) {
    let acme = cloud.tenant("acme");
    // 23 events of 45 KB: about 1.04 MB, just under the 1 MiB a request may carry.
    let pad = "a".repeat(45_000);
    let batch = format!(
        "[{}]",
        vec![format!(r#"{{"type":"custom","name":"big","pad":"{pad}"}}"#); 23].join(",")
    );
    assert!(batch.len() > 1_000_000 && batch.len() < 1024 * 1024);
    let posts: Vec<_> = (0..8)
        .map(|_| {
            let request = client
                .post(format!("{}/v1/signals/{}", cloud.http, acme.signal_key))
                .bearer_auth(&acme.api_key)
                .header("content-type", "application/json")
                .body(batch.clone());
            tokio::spawn(async move {
                let res = request.send().await.unwrap();
                let status = res.status();
                let body: serde_json::Value = res.json().await.unwrap();
                (status, body)
            })
        })
        .collect();
    for post in posts {
        let (status, body) = post.await.unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["ids"].as_array().map(Vec::len), Some(23), "{body}");
    }
    let metrics = cloud.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "signals_ingest_memory_bytes 0"),
        "every share was given back: {metrics}"
    );
}
