//! Storing many events through the Signals API: batches (500 events by default), 8 requests at
//! a time.

use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::Value;

/// Events per request unless a bench asks otherwise.
pub const BATCH: usize = 500;

/// Posts events `make(0)`..`make(n - 1)` in order, `batch` per request, and returns their ids.
pub async fn post_all(
    client: &reqwest::Client,
    url: &str,
    api_key: &str,
    (n, batch): (usize, usize),
    make: impl Fn(usize) -> Value,
) -> Result<Vec<String>> {
    let started = Instant::now();
    let batch = batch.max(1);
    let batches: Vec<usize> = (0..n.div_ceil(batch)).collect();
    let mut ids = Vec::with_capacity(n);
    for chunk in batches.chunks(8) {
        let posts = chunk.iter().map(|b| {
            let events: Vec<Value> = (b * batch..((b + 1) * batch).min(n)).map(&make).collect();
            client.post(url).bearer_auth(api_key).json(&events).send()
        });
        for res in futures_util::future::join_all(posts).await {
            let res = res?;
            if res.status() != 202 {
                bail!("ingest answered {}: {}", res.status(), res.text().await?);
            }
            let body: Value = res.json().await?;
            ids.extend(
                body["ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string)),
            );
        }
    }
    eprintln!(
        "stored {n} events in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(ids)
}
