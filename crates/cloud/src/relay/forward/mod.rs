//! Forwarding: `ANY /v1/bridges/{bridge}/{kind}/{name}/{path…}` becomes one HTTP/2 stream to
//! the least busy live instance of the bridge. Every kind passes the same phases:
//!
//! 1. [`upstream_peers`]: who asks (API key; never another site's page, nor a page loading
//!    the answer as a script: [`crate::cross_site`]) and which instances may answer (live,
//!    declaring the resource);
//! 2. [`upstream_request`]: the request as the bridge sees it: `/{kind}/{name}/{rest}`, the
//!    caller's credentials and hop-by-hop headers removed, the request id and principal added;
//! 3. [`hold_body`]: an idempotent request's small body is held so it can be sent again,
//!    within the memory bound of such bodies ([`crate::body_budget::FORWARDED`]);
//! 4. [`send`]: the stream, retried once on another instance when its tunnel died (before
//!    the answer, or while a small answer was held), under the `--forward-timeout` watchdog;
//!    [`headers::response_filter`] cleans the answer's head and the body streams back ([`body`]).
//!
//! The routes that run these phases are in [`routes`]. What differs per kind on this side is
//! only how a refusal is written ([`kinds`]); the bridge does the rest.

mod answer;
mod body;
mod headers;
mod kinds;
pub mod routes;
mod send;
pub mod stream;
mod target;
mod watch;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, request};
use axum::response::Response;
use bytes::Bytes;
use http_body::Body as HttpBody;
use tunnel::ResourceKind;

use self::send::send;
use self::target::Target;
use super::{Instance, RelayState};
use crate::auth::{InternalCaller, Principal};
use crate::problem::{Problem, storage_unavailable};
use crate::stall::{ReadError, read_whole};

/// Largest body of an idempotent request that is held in memory so that the request can be
/// sent again to another instance if its tunnel dies; larger ones stream and are not retried.
const REPLAYABLE_BODY: usize = 64 * 1024;

/// The shared phases, in order, for a request to `target`; the refusal of the first that
/// fails, which the route writes the way its kind's clients read one.
async fn run(state: &RelayState, target: &Target, req: Request) -> Result<Response, Problem> {
    let (parts, body) = req.into_parts();
    let (principal, instances, head) = match admit(state, target, &parts).await {
        Ok(admitted) => admitted,
        Err(refusal) => {
            // Read first, so that the client sees the refusal rather than a reset stream.
            crate::refused_body::drain_unread(&parts.headers, body).await;
            return Err(refusal);
        }
    };
    let peer = parts
        .extensions
        .get::<crate::auth::PeerAddr>()
        .map(|p| p.0.ip());
    // The reservation of a held body lasts until the answer's head: the body is not sent again
    // after that.
    let (body, _reservation) = hold_body(state.read_timeout, &parts.method, peer, body).await?;
    send(state, target, &principal, &instances, head, body).await
}

/// Phases 1 and 2, which the request's head alone decides.
async fn admit(
    state: &RelayState,
    target: &Target,
    parts: &request::Parts,
) -> Result<(Arc<Principal>, Vec<Arc<Instance>>, Head), Problem> {
    if let Some(refusal) = crate::cross_site::forwarding_refusal(&parts.headers) {
        return Err(refusal);
    }
    if let Some(nul) = crate::inputs::nul_in_path(parts.uri.path()) {
        return Err(nul);
    }
    let principal = if parts.extensions.get::<InternalCaller>().is_some() {
        state.keys.authenticate_internal(&parts.headers)?
    } else {
        state
            .keys
            .authenticate(&state.store, &parts.headers)
            .await?
    };
    let principal = Arc::new(principal);
    let instances = upstream_peers(state, &principal, target).await?;
    let head = upstream_request(parts, target, &principal)?;
    Ok((principal, instances, head))
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
                "no bridge {bridge:?} in the org of this API key; through the cloud an image is named CLOUD/BRIDGE/REGISTRY/REPOSITORY:TAG (the bridge's name, then its registries entry's)"
            )),
            (0, _) => {
                Problem::not_found(format!("no bridge {bridge:?} in the org of this API key"))
            }
            (_, 0) => Problem::unavailable(
                30,
                format!(
                    "bridge {bridge:?} has no tunnel and every token of it is revoked; create one with `cloud bridge-token create --org ORG --name {bridge}` and give it to the bridge"
                ),
            ),
            _ => Problem::unavailable(
                5,
                format!(
                    "bridge {bridge:?} has no live tunnel to this cloud process right now: it may be reconnecting (retry in a few seconds), stopped (ask its operator), or, with several cloud processes, connected to another (docs/bridge.md, \"Not done yet\")"
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
    let instances: Vec<_> = all.iter().filter(|i| declares(i)).cloned().collect();
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
    let recently =
        || (state.registry).recently_declared(principal.org_id, bridge, target.kind, &target.name);
    if instances.is_empty() && recently() {
        return Err(Problem::unavailable(
            5,
            format!(
                "no live instance of bridge {bridge:?} declares {} {:?} right now, though one did less than a minute ago (restarting?); retry shortly",
                target.kind.noun(),
                target.name
            ),
        ));
    }
    if instances.is_empty() {
        let declared = declared_names(&all, target.kind);
        return Err(Problem::not_found(not_declared(target, &declared)));
    }
    Ok(instances)
}

/// The names of the `kind` entries the live instances declare, sorted, each once.
fn declared_names(instances: &[Arc<Instance>], kind: ResourceKind) -> Vec<String> {
    let mut names: Vec<String> = instances
        .iter()
        .flat_map(|i| i.resources.iter())
        .filter(|r| r.kind == kind)
        .map(|r| r.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Why no entry of the bridge answers `target`: the names it does declare, and what the URL
/// probably meant (a Git URL without its source reads git's own `info/refs` as one; a source's
/// name given with `.git`).
fn not_declared(target: &Target, declared: &[String]) -> String {
    let (bridge, kind, name) = (&target.bridge, target.kind, &target.name);
    let mut said = format!(
        "bridge {bridge:?} declares no {} named {name:?} in its `{}` list",
        kind.noun(),
        kind.list_key()
    );
    if kind == ResourceKind::Git && name == "info" && target.rest.starts_with("/refs") {
        said = format!(
            "the URL names no Git source: give one after /git/, as /v1/bridges/{bridge}/git/SOURCE/REPOSITORY"
        );
    } else if let Some(stem) = name.strip_suffix(".git")
        && declared.iter().any(|d| d == stem)
    {
        said.push_str(&format!(" (did you mean {stem:?}?)"));
    }
    match declared {
        [] => said.push_str(&format!("; its `{}` list is empty", kind.list_key())),
        names => said.push_str(&format!("; it declares {}", names.join(", "))),
    }
    said
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
        .map(|q| match target.kind {
            // A mount's source on the same entry, named as the registry knows it.
            ResourceKind::Registry => tunnel::oci::mount_source_as_registry_knows(
                q,
                &[format!("{}/{}/", target.bridge, target.name)],
            ),
            _ => q.into(),
        })
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let uri = format!(
        "/{}/{}{}{query}",
        target.kind.segment(),
        target.name,
        target.rest
    );
    if let Some(codings) = tunnel::hop::coded_transfer(&parts.headers) {
        return Err(Problem::bad_request(format!(
            "Transfer-Encoding: {codings} is not forwarded (only chunked framing is: the coding would be lost on the way); send the body with Content-Encoding instead"
        )));
    }
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
/// a second instance can be sent the same; anything else streams. A held body takes its room
/// in the memory bound of such bodies ([`crate::body_budget::FORWARDED`]), given back when the
/// reservation returned with it
/// is dropped; when there is none (many slow uploads at once, or many from `peer`), the body
/// streams instead, sent once, so callers cannot hold the service's memory by uploading slowly.
async fn hold_body(
    read_timeout: std::time::Duration,
    method: &Method,
    peer: Option<std::net::IpAddr>,
    body: Body,
) -> Result<(Outgoing, Option<crate::body_budget::Reservation>), Problem> {
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    );
    if !idempotent {
        return Ok((Outgoing::Streamed(body), None));
    }
    // From the body, not the headers: an HTTP/2 request may stream a body with neither
    // Content-Length nor Transfer-Encoding.
    if body.is_end_stream() {
        return Ok((Outgoing::Held(Bytes::new()), None));
    }
    let Some(most) = body
        .size_hint()
        .upper()
        .filter(|n| *n <= REPLAYABLE_BODY as u64)
    else {
        return Ok((Outgoing::Streamed(body), None));
    };
    let Some(reservation) = crate::body_budget::FORWARDED.reserve(peer, most as usize) else {
        return Ok((Outgoing::Streamed(body), None));
    };
    let mut body = body;
    // Each pause is bounded by the read timeout, and the whole body by four of them, as for
    // every body read whole.
    let whole = read_timeout * 4;
    let Ok(read) =
        tokio::time::timeout(whole, read_whole(&mut body, REPLAYABLE_BODY, read_timeout)).await
    else {
        return Err(Problem::request_timeout(format!(
            "the request body did not arrive whole within {} s (4 x --header-read-timeout); send it faster",
            whole.as_secs()
        )));
    };
    match read {
        Ok(bytes) => Ok((Outgoing::Held(bytes), Some(reservation))),
        Err(ReadError::Stalled) => Err(Problem::body_stalled(read_timeout)),
        Err(ReadError::TooLarge) => Err(Problem::bad_request(
            "the request body is longer than its Content-Length announced",
        )),
        Err(ReadError::Body(e)) => Err(Problem::body_unreadable(&e)),
    }
}

#[cfg(test)]
mod tests;
