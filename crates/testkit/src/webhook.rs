//! A webhook receiver for the notification tests, on an ephemeral port: it records every POST
//! (its `Signature` header and raw body) and answers 500 to the first `fail_first` of them,
//! then 200, so tests see retries.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

/// One POST as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The `Signature` header.
    pub signature: String,
    /// The raw body.
    pub body: String,
    /// The status the receiver answered.
    pub answered: u16,
}

/// A running receiver.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver that fails the first `fail_first` deliveries.
    pub async fn start(fail_first: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(AtomicUsize::new(fail_first));
        let log = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (log, failures) = (log.clone(), failures.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (log, failures) = (log.clone(), failures.clone());
                        async move {
                            let signature = req
                                .headers()
                                .get("signature")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            let body = req.into_body().collect().await.map(|b| b.to_bytes());
                            let body =
                                String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
                            let fail = failures
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                })
                                .is_ok();
                            let answered = if fail { 500 } else { 200 };
                            log.lock().unwrap().push(Received {
                                signature,
                                body,
                                answered,
                            });
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(answered)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            url,
            received,
            task,
        }
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) until a POST whose body contains `needle` was answered 200; returns
    /// every POST received by then.
    pub async fn wait_delivered(&self, needle: &str) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let all = self.received();
            if all
                .iter()
                .any(|r| r.answered == 200 && r.body.contains(needle))
            {
                return all;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no delivery containing {needle:?} within 30 s; received: {all:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Checks a `Signature: t=…,v1=…` header as a receiver would, independently of the cloud's
/// code: HMAC-SHA256 keyed with `secret` over `t.body`.
pub fn signature_valid(secret: &str, header: &str, body: &str) -> bool {
    let mut t = "";
    let mut v1 = "";
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v,
            Some(("v1", v)) => v1 = v,
            _ => {}
        }
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, format!("{t}.{body}").as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    !t.is_empty() && hex == v1
}
