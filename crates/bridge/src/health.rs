//! The operator's port (`health_check_port`): `/livez` (the process runs), `/health`
//! (readiness: the JSON of docs/bridge.md, 503 when unhealthy) and `/metrics` (Prometheus text).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::status::Status;

#[derive(Clone)]
struct HealthState {
    status: Arc<Status>,
    metrics: Metrics,
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn health(State(s): State<HealthState>) -> Response {
    let h = s.status.health();
    let code = if h.status == "unhealthy" {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(h)).into_response()
}

/// OpenMetrics when the scraper asks for it (Prometheus does), else the Prometheus text format.
async fn metrics_text(State(s): State<HealthState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, text) = tunnel::exposition::negotiate(accept, s.metrics.encode());
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// Most connections the operator's port serves at once: probes and scrapers need a few; more
/// wait in the kernel's backlog, so a flood of them costs no memory here.
const MAX_CONNECTIONS: usize = 128;
/// Most of them from one client address: one client that opens connections and stays silent
/// cannot take the slots of the probes and the scraper (closed at once beyond it).
const PER_ADDRESS: usize = 16;
/// How long a client has to send a request's head, an idle keep-alive connection included:
/// one that sends nothing is closed rather than held.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long answers in flight on the operator's port may take once the bridge is done.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// One connection counted against its client address until dropped.
struct AddressSlot {
    counts: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl AddressSlot {
    /// Counts a connection from `address`, or `None` when that address has [`PER_ADDRESS`].
    fn take(
        counts: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
        address: IpAddr,
    ) -> Option<Self> {
        let mut map = counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = map.entry(address).or_default();
        if *count >= PER_ADDRESS {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            counts: counts.clone(),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = map.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.address);
            }
        }
    }
}

/// Serves the three endpoints until `shutdown` (HTTP/1.1, at most [`MAX_CONNECTIONS`] at once,
/// each closed after [`HEAD_TIMEOUT`] without a request), then lets answers in flight finish.
pub async fn serve(
    listener: TcpListener,
    status: Arc<Status>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .with_state(HealthState { status, metrics });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(addr = %addr, "health endpoint listening");
    }
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_address = Arc::new(std::sync::Mutex::new(HashMap::<IpAddr, usize>::new()));
    let graceful = GracefulShutdown::new();
    loop {
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!(cause = %e, "health endpoint cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(counted) = AddressSlot::take(&per_address, peer.ip()) else {
            continue;
        };
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT);
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop((slot, counted));
        });
    }
    // The bridge has drained by now: answers in flight get a moment, idle probes none.
    let _ = tokio::time::timeout(CLOSE_GRACE, graceful.shutdown()).await;
}
