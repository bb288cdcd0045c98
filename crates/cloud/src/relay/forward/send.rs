//! Phase 4 of forwarding: the stream into the tunnel, on the least busy instance and, when its
//! tunnel fails, on the next one: once more for a request that may be sent twice, and always
//! for one a draining tunnel handed back unsent. The answer's head is cleaned
//! ([`super::headers::response_filter`]) and its body streams back ([`super::body`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::response::Response;
use http_body::Body as HttpBody;

use super::answer::{Answer, InFlight};
use super::body::{Announced, Tracked};
use super::target::Target;
use super::watch::Watch;
use super::{Head, Outgoing, REPLAYABLE_BODY, headers};
use crate::problem::Problem;
use crate::relay::{Instance, RelayState};
use crate::stall::{ReadError, StallTimer, read_whole};

/// Phase 4: the stream, on the first instance and, for a held request whose tunnel failed,
/// once more on the next one. When there is a next one, a small answer of known length is
/// also held until it is whole, so a tunnel that dies mid-response is retried too.
pub(super) async fn send(
    state: &RelayState,
    target: &Target,
    principal: &Arc<crate::auth::Principal>,
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
    let upload_broken = Arc::new(OnceLock::new());
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
                            broken: upload_broken.clone(),
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
                let body = Body::new(Tracked::new(
                    Answer {
                        inner: incoming,
                        _guard: guard,
                    },
                    StallTimer::new(timeout),
                    Watch::new(state, principal),
                ));
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
            Err(_) if upload_broken.get().is_some() => {
                let why = upload_broken.get().map_or("", String::as_str);
                return Err(Problem::body_unreadable(&why));
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
