//! Forwarding: `ANY /v1/bridges/{bridge}/{kind}/{name}/{path…}` becomes one HTTP/2 stream to
//! the least busy live instance of the bridge. Every kind passes the same phases:
//!
//! 1. [`upstream_peers`]: who asks (API key; never another site's page, nor a page loading
//!    the answer as a script: [`crate::cross_site`]) and which instances may answer (live,
//!    declaring the resource);
//! 2. [`upstream_request`]: the request as the bridge sees it: `/{kind}/{name}/{rest}`, the
//!    caller's credentials and hop-by-hop headers removed, the request id and principal added;
//! 3. [`hold_body`]: an idempotent request's small body is held so it can be sent again;
//! 4. [`send`]: the stream, retried once on another instance when its tunnel died (before
//!    the answer, or while a small answer was held), under the `--forward-timeout` watchdog;
//!    [`headers::response_filter`] cleans the answer's head and the body streams back ([`body`]).
//!
//! The routes that run these phases are in [`routes`]. What differs per kind on this side is
//! only how a refusal is written ([`kinds`]); the bridge does the rest.

mod body;
mod headers;
mod kinds;
pub mod routes;
pub mod stream;
mod target;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, request};
use axum::response::Response;
use bytes::Bytes;
use http_body::Body as HttpBody;
use tunnel::ResourceKind;

use self::body::{Announced, InFlight, Tracked};
use self::target::Target;
use super::{Instance, RelayState};
use crate::auth::{InternalCaller, Principal};
use crate::problem::{Problem, storage_unavailable};
use crate::stall::{ReadError, StallTimer, read_whole};

/// Largest body of an idempotent request that is held in memory so that the request can be
/// sent again to another instance if its tunnel dies; larger ones stream and are not retried.
const REPLAYABLE_BODY: usize = 64 * 1024;

/// The shared phases, in order, for a request to `target`; the refusal of the first that
/// fails, which the route writes the way its kind's clients read one.
async fn run(state: &RelayState, target: &Target, req: Request) -> Result<Response, Problem> {
    if let Some(refusal) = crate::cross_site::forwarding_refusal(req.headers()) {
        return Err(refusal);
    }
    let principal = if req.extensions().get::<InternalCaller>().is_some() {
        state.keys.authenticate_internal(req.headers())?
    } else {
        state.keys.authenticate(&state.store, req.headers()).await?
    };
    let instances = upstream_peers(state, &principal, target).await?;
    let (parts, body) = req.into_parts();
    let head = upstream_request(&parts, target, &principal)?;
    let body = hold_body(state, &parts.method, body).await?;
    send(state, target, &instances, head, body).await
}

/// Phase 1: the live instances of the bridge that declare the resource, least busy first;
/// 404 for a bridge or resource that does not exist, 503 while a known bridge has no tunnel.
async fn upstream_peers(
    state: &RelayState,
    principal: &Principal,
    target: &Target,
) -> Result<Vec<Arc<Instance>>, Problem> {
    let bridge = &target.bridge;
    let all = state.registry.ready(principal.org_id, bridge);
    if all.is_empty() {
        let (tokens, active) = state
            .store
            .bridge_tokens_count(principal.org_id, bridge)
            .await
            .map_err(|e| storage_unavailable(&e))?;
        return Err(match (tokens, active) {
            (0, _) if target.kind == ResourceKind::Registry => Problem::not_found(format!(
                "no bridge {bridge:?} in this org; through the cloud an image is named CLOUD/BRIDGE/REGISTRY/REPOSITORY:TAG (the bridge's name, then its registries entry's)"
            )),
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
    let declares = |i: &Arc<Instance>| {
        i.resources
            .iter()
            .any(|r| r.kind == target.kind && r.name == target.name)
    };
    let instances: Vec<_> = all.into_iter().filter(|i| declares(i)).collect();
    let draining = || (state.registry.instances(principal.org_id, bridge).iter()).any(&declares);
    if instances.is_empty() && draining() {
        return Err(Problem::unavailable(
            5,
            format!(
                "the instances of bridge {bridge:?} that declare {} {:?} are shutting down; retry shortly",
                target.kind.noun(),
                target.name
            ),
        ));
    }
    if instances.is_empty() {
        return Err(Problem::not_found(format!(
            "bridge {bridge:?} declares no {} named {:?} in its `{}` list",
            target.kind.noun(),
            target.name,
            target.kind.list_key()
        )));
    }
    Ok(instances)
}

/// The head of the stream sent into the tunnel.
struct Head {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

/// Phase 2: the request as the bridge sees it.
fn upstream_request(
    parts: &request::Parts,
    target: &Target,
    principal: &Principal,
) -> Result<Head, Problem> {
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let uri = format!(
        "/{}/{}{}{query}",
        target.kind.segment(),
        target.name,
        target.rest
    );
    let mut headers = headers::request_filter(&parts.headers);
    let set = |h: &mut HeaderMap, k: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(HeaderName::from_static(k), v);
        }
    };
    set(
        &mut headers,
        tunnel::HEADER_REQUEST_ID,
        &uuid::Uuid::new_v4().to_string(),
    );
    set(&mut headers, tunnel::HEADER_PRINCIPAL, &principal.key_id);
    set(
        &mut headers,
        tunnel::HEADER_ORG,
        &principal.org_id.to_string(),
    );
    // HTTP/2 carries CONNECT only without a path: the bridge gets the method in a header and
    // refuses it (405, audited) like any method it never forwards.
    let method = if parts.method == Method::CONNECT {
        set(
            &mut headers,
            tunnel::HEADER_METHOD,
            Method::CONNECT.as_str(),
        );
        Method::GET
    } else {
        parts.method.clone()
    };
    // The path and the query are the caller's, as sent, so they parse; were one not to, the
    // request is refused rather than sent somewhere else.
    let uri = uri.parse::<Uri>().map_err(|_| {
        Problem::bad_request(format!(
            "the path {:?} is not a valid request target; percent-encode it (RFC 3986)",
            target.rest
        ))
    })?;
    Ok(Head {
        method,
        uri,
        headers,
    })
}

/// What goes into the tunnel as the request body.
enum Outgoing {
    /// Held whole (empty for a bodiless request): the request may be sent twice.
    Held(Bytes),
    /// Streams from the caller: sent once.
    Streamed(Body),
}

/// Phase 3: an idempotent request's body of at most [`REPLAYABLE_BODY`] is read whole, so that
/// a second instance can be sent the same; anything else streams.
async fn hold_body(state: &RelayState, method: &Method, body: Body) -> Result<Outgoing, Problem> {
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    );
    if !idempotent {
        return Ok(Outgoing::Streamed(body));
    }
    // From the body, not the headers: an HTTP/2 request may stream a body with neither
    // Content-Length nor Transfer-Encoding.
    if body.is_end_stream() {
        return Ok(Outgoing::Held(Bytes::new()));
    }
    if body
        .size_hint()
        .upper()
        .is_none_or(|n| n > REPLAYABLE_BODY as u64)
    {
        return Ok(Outgoing::Streamed(body));
    }
    let mut body = body;
    match read_whole(&mut body, REPLAYABLE_BODY, state.read_timeout).await {
        Ok(bytes) => Ok(Outgoing::Held(bytes)),
        Err(ReadError::Stalled) => Err(Problem::body_stalled(state.read_timeout)),
        Err(ReadError::TooLarge) => Err(Problem::bad_request(
            "the request body is longer than its Content-Length announced",
        )),
        Err(ReadError::Body(e)) => Err(Problem::bad_request(format!(
            "could not read the request body: {e}"
        ))),
    }
}

/// Phase 4: the stream, on the first instance and, for a held request whose tunnel failed,
/// once more on the next one. When there is a next one, a small answer of known length is
/// also held until it is whole, so a tunnel that dies mid-response is retried too.
async fn send(
    state: &RelayState,
    target: &Target,
    instances: &[Arc<Instance>],
    head: Head,
    body: Outgoing,
) -> Result<Response, Problem> {
    let bridge = &target.bridge;
    let (held, mut streamed) = match body {
        Outgoing::Held(bytes) => (Some(bytes), None),
        Outgoing::Streamed(body) => (None, Some(body)),
    };
    let retryable = held.is_some();
    let timeout = state.forward_timeout;
    let mut last_error = String::new();
    let upload_stalled = Arc::new(AtomicBool::new(false));
    // Attempts that reached a bridge: a held request may be sent twice, a streamed one once.
    let mut attempts_left = instances.len().min(if retryable { 2 } else { 1 });
    // A request a draining tunnel refused before opening its stream (it never left this
    // process, body and all): it goes to the next instance as it is, whatever its method.
    let mut unsent: Option<Unsent> = None;
    for (i, instance) in instances.iter().enumerate() {
        if attempts_left == 0 {
            break;
        }
        let another = attempts_left > 1 && i + 1 < instances.len();
        let Unsent {
            request,
            uploaded,
            moved,
        } = match unsent.take() {
            Some(unsent) => unsent,
            None => {
                // The --forward-timeout counts from the end of the request body: a slow upload
                // is not a slow answer. While the body goes out, it bounds each stretch
                // without progress.
                let moved = Arc::new(AtomicU64::new(0));
                let (this_body, uploaded) = match (&held, streamed.take()) {
                    (Some(bytes), _) if bytes.is_empty() => (Body::empty(), None),
                    (Some(bytes), _) => (Body::from(bytes.clone()), None),
                    (None, Some(inner)) => {
                        let (done, uploaded) = tokio::sync::oneshot::channel();
                        let body = Body::new(Announced {
                            inner,
                            done: Some(done),
                            stall: StallTimer::new(state.read_timeout),
                            stalled: upload_stalled.clone(),
                            moved: moved.clone(),
                        });
                        (body, Some(uploaded))
                    }
                    (None, None) => (Body::empty(), None),
                };
                let mut request = hyper::Request::new(this_body);
                *request.method_mut() = head.method.clone();
                *request.uri_mut() = head.uri.clone();
                *request.headers_mut() = head.headers.clone();
                Unsent {
                    request,
                    uploaded,
                    moved,
                }
            }
        };
        let guard = InFlight::new(instance.clone());
        let mut sender = instance.sender.clone();
        let mut uploaded = uploaded;
        let answered = tokio::select! {
            answered = sender.try_send_request(request) => answered,
            why = watchdog(&mut uploaded, moved.clone(), timeout) => {
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
                let (mut parts, mut incoming) = response.into_parts();
                headers::response_filter(&mut parts.headers);
                if another && holdable(&incoming) {
                    match read_whole(&mut incoming, REPLAYABLE_BODY, timeout).await {
                        Ok(bytes) => return Ok(Response::from_parts(parts, Body::from(bytes))),
                        Err(ReadError::Body(e)) => {
                            tracing::warn!(bridge, instance = %instance.id, cause = %e, "tunnel failed mid-response; retrying on another instance");
                            state.metrics.relay_retry("mid_response");
                            last_error = e.to_string();
                            attempts_left -= 1;
                            continue;
                        }
                        Err(ReadError::Stalled | ReadError::TooLarge) => {
                            return Err(Problem::gateway_timeout(format!(
                                "bridge {bridge:?} stopped sending its answer for {} s (--forward-timeout)",
                                timeout.as_secs()
                            )));
                        }
                    }
                }
                let body = Body::new(Tracked {
                    inner: incoming,
                    _guard: guard,
                    stall: StallTimer::new(timeout),
                });
                return Ok(Response::from_parts(parts, body));
            }
            Err(mut refused) if refused.message().is_some() => {
                instance.draining.store(true, Ordering::Relaxed);
                tracing::info!(bridge, instance = %instance.id, "the instance is shutting down (its tunnel takes no new streams); the request goes to another");
                if i + 1 < instances.len() {
                    state.metrics.relay_retry("draining");
                }
                unsent = refused.take_message().map(|request| Unsent {
                    request,
                    uploaded,
                    moved,
                });
            }
            Err(_) if upload_stalled.load(Ordering::Relaxed) => {
                return Err(Problem::body_stalled(state.read_timeout));
            }
            Err(failed) => {
                let e = failed.into_error();
                tracing::warn!(bridge, instance = %instance.id, cause = %e, retryable, "forwarding through tunnel failed");
                if another {
                    state.metrics.relay_retry("before_response");
                }
                last_error = e.to_string();
                attempts_left -= 1;
            }
        }
    }
    if unsent.is_some() {
        return Err(Problem::unavailable(
            5,
            format!(
                "no instance of bridge {bridge:?} could take the request (the one tried was shutting down or its tunnel had closed); retry shortly"
            ),
        ));
    }
    Err(Problem::bad_gateway(format!(
        "the tunnel to bridge {bridge:?} failed while forwarding ({last_error}); retry"
    )))
}

/// A request as it was built for the tunnel, with what the watchdog follows of its upload.
struct Unsent {
    request: hyper::Request<Body>,
    uploaded: Option<tokio::sync::oneshot::Receiver<()>>,
    moved: Arc<AtomicU64>,
}

/// Whether an answer is held whole before it goes to the caller, so that a tunnel dying
/// mid-body can still be retried: a body of known length of at most [`REPLAYABLE_BODY`]. A
/// longer or streamed one goes out as it comes; if its tunnel dies, the caller's connection
/// (or HTTP/2 stream) is reset, never left hanging.
fn holdable(body: &hyper::body::Incoming) -> bool {
    body.size_hint()
        .exact()
        .is_some_and(|n| n <= REPLAYABLE_BODY as u64)
}

/// Resolves with the reason once the exchange has made no progress for `timeout`: while the
/// upload goes out, a stretch in which it did not move; after it, the wait for the answer.
async fn watchdog(
    uploaded: &mut Option<tokio::sync::oneshot::Receiver<()>>,
    moved: Arc<AtomicU64>,
    timeout: std::time::Duration,
) -> &'static str {
    if let Some(uploaded) = uploaded {
        let mut seen = moved.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                _ = &mut *uploaded => break,
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
}
