//! Forwarding: `ANY /v1/bridges/{bridge}/apis/{api}/{path…}` becomes one HTTP/2 stream to the
//! least busy live instance of the bridge. Bodies stream both ways (only an idempotent
//! request's body of at most 64 KiB is held, to be sent again); the caller's API key is not
//! forwarded; an idempotent request (GET, HEAD, OPTIONS, PUT, DELETE) whose tunnel died is
//! retried once on another instance.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use serde_json::json;
use tunnel::ResourceKind;

use super::Instance;
use crate::api::AppState;
use crate::api::auth::storage_unavailable;
use crate::api::problem::Problem;
use crate::stall::{ReadError, StallTimer, Stalled, read_whole};

/// Largest body of an idempotent request that is held in memory so that the request can be
/// sent again to another instance if its tunnel dies; larger ones stream and are not retried.
const REPLAYABLE_BODY: usize = 64 * 1024;

/// Headers that belong to one hop, or to the caller's credentials, and are never forwarded.
const DROPPED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// `GET /v1/bridges`: the org's connected bridges and their instances.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, Problem> {
    let principal = state.keys.authenticate(&state.store, &headers).await?;
    Ok(Json(
        json!({"bridges": state.relay.registry.list(principal.org_id)}),
    ))
}

/// `ANY /v1/bridges/{bridge}/apis/{api}`.
pub async fn api_root(
    State(state): State<AppState>,
    Path((bridge, api)): Path<(String, String)>,
    req: Request,
) -> Response {
    forward(state, ResourceKind::Api, bridge, api, req).await
}

/// `ANY /v1/bridges/{bridge}/apis/{api}/{*path}`.
pub async fn api_path(
    State(state): State<AppState>,
    Path((bridge, api, _rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    forward(state, ResourceKind::Api, bridge, api, req).await
}

async fn forward(
    state: AppState,
    kind: ResourceKind,
    bridge: String,
    name: String,
    req: Request,
) -> Response {
    match try_forward(&state, kind, &bridge, &name, req).await {
        Ok(r) => r,
        Err(p) => p.into_response(),
    }
}

async fn try_forward(
    state: &AppState,
    kind: ResourceKind,
    bridge: &str,
    name: &str,
    req: Request,
) -> Result<Response, Problem> {
    let principal = state.keys.authenticate(&state.store, req.headers()).await?;
    let all = state.relay.registry.instances(principal.org_id, bridge);
    if all.is_empty() {
        let (tokens, active) = state
            .store
            .bridge_tokens_count(principal.org_id, bridge)
            .await
            .map_err(|e| storage_unavailable(&e))?;
        return Err(match (tokens, active) {
            (0, _) => Problem::not_found(format!("no bridge {bridge:?} in this org")),
            (_, 0) => Problem::unavailable(
                30,
                format!(
                    "bridge {bridge:?} has no tunnel and every token of it is revoked; create one with `cloud bridge-token create --org ORG --name {bridge}` and give it to the bridge"
                ),
            ),
            _ => Problem::unavailable(
                5,
                format!(
                    "bridge {bridge:?} has no live tunnel right now (it may be reconnecting); retry shortly"
                ),
            ),
        });
    }
    // During a rollout instances may declare different resources: only those that declare
    // this one are candidates.
    let instances: Vec<_> = all
        .into_iter()
        .filter(|i| i.resources.iter().any(|r| r.kind == kind && r.name == name))
        .collect();
    if instances.is_empty() {
        return Err(Problem::not_found(format!(
            "bridge {bridge:?} declares no {} named {name:?}",
            kind.segment()
        )));
    }
    let (parts, body) = req.into_parts();
    let request_id = uuid::Uuid::new_v4().to_string();
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    // The raw (still percent-encoded) rest of the path, so `%2F` stays `%2F` and the bridge's
    // path check sees exactly what the caller sent: /v1/bridges/{b}/apis/{api}/{rest}.
    let rest = parts.uri.path().splitn(7, '/').nth(6).unwrap_or("");
    let uri = format!("/{}/{name}/{rest}{query}", kind.segment());
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 3);
    for (k, v) in &parts.headers {
        if !DROPPED.contains(&k.as_str()) && !k.as_str().starts_with("x-bridge-") {
            headers.append(k.clone(), v.clone());
        }
    }
    let set = |h: &mut HeaderMap, k: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(HeaderName::from_static(k), v);
        }
    };
    set(&mut headers, tunnel::HEADER_REQUEST_ID, &request_id);
    set(&mut headers, tunnel::HEADER_PRINCIPAL, &principal.key_id);
    set(
        &mut headers,
        tunnel::HEADER_ORG,
        &principal.org_id.to_string(),
    );
    // From the body, not the headers: an HTTP/2 request may stream a body with neither
    // Content-Length nor Transfer-Encoding.
    let bodiless = body.is_end_stream();
    let small = body
        .size_hint()
        .upper()
        .is_some_and(|n| n <= REPLAYABLE_BODY as u64);
    let idempotent = matches!(
        parts.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    );
    let mut body = Some(body);
    // What an idempotent request sends, kept so that a second instance can be sent the same.
    let replay = if !idempotent {
        None
    } else if bodiless {
        Some(Bytes::new())
    } else if small {
        let mut held = body.take().unwrap_or_default();
        match read_whole(&mut held, REPLAYABLE_BODY, state.read_timeout).await {
            Ok(bytes) => Some(bytes),
            Err(ReadError::Stalled) => return Err(Problem::body_stalled(state.read_timeout)),
            Err(ReadError::TooLarge) => {
                return Err(Problem::bad_request(
                    "the request body is longer than its Content-Length announced",
                ));
            }
            Err(ReadError::Body(e)) => {
                return Err(Problem::bad_request(format!(
                    "could not read the request body: {e}"
                )));
            }
        }
    } else {
        None
    };
    let retryable = replay.is_some();
    let mut last_error = String::new();
    let upload_stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for instance in instances.iter().take(if retryable { 2 } else { 1 }) {
        let mut builder = hyper::Request::builder()
            .method(parts.method.clone())
            .uri(&uri);
        if let Some(h) = builder.headers_mut() {
            *h = headers.clone();
        }
        // The --forward-timeout counts from the end of the request body: a slow upload is
        // not a slow answer. While the body goes out, it bounds each stretch without progress.
        let moved = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (this_body, uploaded) = if let Some(bytes) = &replay {
            let body = if bytes.is_empty() {
                Body::empty()
            } else {
                Body::from(bytes.clone())
            };
            (body, None)
        } else if bodiless {
            (body.take().unwrap_or_default(), None)
        } else {
            let (done, uploaded) = tokio::sync::oneshot::channel();
            let inner = body.take().unwrap_or_default();
            (
                Body::new(Announced {
                    inner,
                    done: Some(done),
                    stall: StallTimer::new(state.read_timeout),
                    stalled: upload_stalled.clone(),
                    moved: moved.clone(),
                }),
                Some(uploaded),
            )
        };
        let request = builder
            .body(this_body)
            .map_err(|e| Problem::bad_request(format!("cannot forward this request: {e}")))?;
        let guard = InFlight::new(instance.clone());
        let mut sender = instance.sender.clone();
        let timeout = state.relay.forward_timeout;
        let deadline = async move {
            if let Some(uploaded) = uploaded {
                tokio::pin!(uploaded);
                let mut seen = moved.load(Ordering::Relaxed);
                loop {
                    tokio::select! {
                        _ = &mut uploaded => break,
                        () = tokio::time::sleep(timeout) => {
                            let now = moved.load(Ordering::Relaxed);
                            if now == seen {
                                return "the upload stopped moving (the bridge or the internal system stopped reading it)";
                            }
                            seen = now;
                        }
                    }
                }
            }
            tokio::time::sleep(timeout).await;
            "the internal system may be slow or the bridge busy"
        };
        let answered = tokio::select! {
            answered = sender.send_request(request) => answered,
            why = deadline => {
                // Dropping the request resets its stream: the bridge stops waiting too.
                tracing::warn!(bridge, instance = %instance.id, timeout = ?timeout, why, "forwarded request timed out");
                return Err(Problem::gateway_timeout(format!(
                    "bridge {bridge:?} did not answer within {} s (--forward-timeout); {why}",
                    timeout.as_secs()
                )));
            }
        };
        match answered {
            Ok(response) => {
                let (mut parts, incoming) = response.into_parts();
                // One pass over the response's few headers, not one lookup per listed name.
                let dropped: Vec<HeaderName> = parts
                    .headers
                    .keys()
                    .filter(|k| DROPPED.contains(&k.as_str()))
                    .cloned()
                    .collect();
                for name in dropped {
                    parts.headers.remove(name);
                }
                let body = Body::new(Tracked {
                    inner: incoming,
                    _guard: guard,
                    stall: StallTimer::new(timeout),
                });
                return Ok(Response::from_parts(parts, body));
            }
            Err(_) if upload_stalled.load(Ordering::Relaxed) => {
                return Err(Problem::body_stalled(state.read_timeout));
            }
            Err(e) => {
                tracing::warn!(bridge, instance = %instance.id, cause = %e, retryable, "forwarding through tunnel failed");
                last_error = e.to_string();
            }
        }
    }
    let mut p = Problem::unavailable(
        1,
        format!("the tunnel to bridge {bridge:?} failed while forwarding ({last_error}); retry"),
    );
    p.status = StatusCode::BAD_GATEWAY.as_u16();
    p.retry_after = None;
    Err(p)
}

/// A request body that says when it has been sent whole (or given up), so that the
/// `--forward-timeout` starts only then; and that fails (resetting the tunnel stream, so the
/// bridge frees its slot) when the caller pauses mid-upload for `--header-read-timeout`.
struct Announced {
    inner: Body,
    done: Option<tokio::sync::oneshot::Sender<()>>,
    stall: StallTimer,
    stalled: Arc<std::sync::atomic::AtomicBool>,
    /// Pieces sent so far: the forward's watchdog sees whether the upload still moves.
    moved: Arc<std::sync::atomic::AtomicU64>,
}

impl HttpBody for Announced {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let polled = match ready!(this.stall.poll_frame(&mut this.inner, cx)) {
            Ok(frame) => {
                this.moved.fetch_add(1, Ordering::Relaxed);
                frame.map(|f| f.map_err(Into::into))
            }
            Err(Stalled) => {
                this.stalled.store(true, Ordering::Relaxed);
                Some(Err(Cut::Upload(this.stall.limit()).into()))
            }
        };
        if matches!(polled, None | Some(Err(_)))
            && let Some(done) = this.done.take()
        {
            let _ = done.send(());
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

/// Counts a stream as in flight on its instance until the response body is done.
struct InFlight(Arc<Instance>);

impl InFlight {
    fn new(instance: Arc<Instance>) -> Self {
        instance.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(instance)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds its [`InFlight`] guard until it ends, and fails when the bridge
/// sends nothing for `--forward-timeout` while the caller waits for more (a hung internal
/// system would otherwise hold the caller's connection forever). Dropping it resets the
/// tunnel stream.
struct Tracked {
    inner: hyper::body::Incoming,
    _guard: InFlight,
    stall: StallTimer,
}

/// Why a forwarded body was cut.
#[derive(Debug, thiserror::Error)]
enum Cut {
    /// The bridge went silent mid-response.
    #[error("the bridge sent no response data for {0:?} (--forward-timeout); the stream was reset")]
    Response(std::time::Duration),
    /// The caller went silent mid-upload.
    #[error("the request body stopped arriving for {0:?} (--header-read-timeout)")]
    Upload(std::time::Duration),
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        Poll::Ready(match ready!(this.stall.poll_frame(&mut this.inner, cx)) {
            Ok(frame) => frame.map(|f| f.map_err(Into::into)),
            Err(Stalled) => {
                tracing::warn!(stall = ?this.stall.limit(), "forwarded response stalled; resetting its stream");
                Some(Err(Cut::Response(this.stall.limit()).into()))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
