//! The HTTP calls tests make to a running [`Cloud`]: signals, queries and `/metrics`, with a
//! client that trusts the server's own CA.

use std::time::Duration;

use serde_json::Value;

use crate::{Cloud, Tenant, install_crypto};

impl Cloud {
    /// Posts `body` as sent to the tenant's signal URL (JSON text a JSON library would not
    /// write itself), with its API key.
    pub async fn post_signal_text(&self, t: &Tenant, body: String) -> reqwest::Response {
        self.client()
            .post(format!("{}/v1/signals/{}", self.http, t.signal_key))
            .bearer_auth(&t.api_key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("post a signal")
    }

    /// Posts one event that must be accepted (202); returns its id.
    pub async fn post_event(&self, t: &Tenant, event: &Value) -> String {
        let res = self.post_signal_text(t, event.to_string()).await;
        let status = res.status();
        let body: Value = res.json().await.expect("a JSON answer");
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().expect("an id").to_string()
    }

    /// The status of `GET /v1/events` with `key`: whether the server takes the key.
    pub async fn events_status(&self, key: &str) -> reqwest::StatusCode {
        self.client()
            .get(format!("{}/v1/events", self.http))
            .bearer_auth(key)
            .send()
            .await
            .expect("GET /v1/events")
            .status()
    }

    /// `GET {path}` on the plain listener with `key`: the JSON answer.
    pub async fn get_json(&self, key: &str, path: &str) -> Value {
        self.client()
            .get(format!("{}{path}", self.http))
            .bearer_auth(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
    }

    /// The text of `GET /metrics`.
    pub async fn metrics_text(&self) -> String {
        self.client()
            .get(format!("{}/metrics", self.http))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body")
    }

    /// Waits (up to 10 s) until requests hold at least `bytes` of `--ingest-memory-mb`
    /// (`signals_ingest_memory_bytes` in `/metrics`): a request takes its share once its head
    /// is read, and grows it to the whole body once its body outgrows that.
    pub async fn wait_ingesting(&self, bytes: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let held = self
                .metrics_text()
                .await
                .lines()
                .find_map(|l| {
                    l.strip_prefix("signals_ingest_memory_bytes ")?
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or(0);
            if held >= bytes {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server holds {held} bytes of bodies, never {bytes}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A client that trusts the server's CA (`DIR/ca.pem`).
    pub fn client(&self) -> reqwest::Client {
        install_crypto();
        let ca = std::fs::read(self.data_dir.path().join("ca.pem")).expect("ca.pem");
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("ca"))
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client")
    }
}
