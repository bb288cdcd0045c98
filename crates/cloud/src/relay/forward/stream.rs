//! Byte streams through the tunnel: a database session (or a cancel) is one HTTP/2 extended
//! CONNECT (`:protocol postgresql`) to `/databases/{name}/` on the least busy live instance
//! that declares the database. The same first phase as HTTP forwarding picks the instance;
//! what flows afterwards is the PostgreSQL protocol, not HTTP, and is the caller's business.

use axum::body::Body;
use axum::http::{HeaderValue, Method};
use http_body_util::BodyExt;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tunnel::ResourceKind;

use super::answer::InFlight;
use super::{Target, upstream_peers};
use crate::auth::Principal;
use crate::problem::Problem;
use crate::relay::RelayState;

/// An open database stream; the instance's in-flight count drops with it.
pub struct DatabaseStream {
    /// Both directions of the stream.
    pub io: TokioIo<Upgraded>,
    /// The bridge instance that carries it.
    pub instance: String,
    _in_flight: InFlight,
}

/// Opens a session stream (or, with `cancel`, a cancel stream) to database `name` of
/// `bridge`. Refusals are problems as HTTP forwarding gives them: 404 for a bridge or database
/// that does not exist, 503 while the bridge has no tunnel or is at its `max_connections`
/// (the detail says which), 502 when the stream fails.
pub async fn open_database(
    state: &RelayState,
    principal: &Principal,
    bridge: &str,
    name: &str,
    cancel: bool,
) -> Result<DatabaseStream, Problem> {
    let target = Target {
        kind: ResourceKind::Database,
        bridge: bridge.to_string(),
        name: name.to_string(),
        rest: "/".into(),
    };
    let instances = upstream_peers(state, principal, &target).await?;
    let mut last = String::new();
    // A cancel may go to any instance (the database itself knows the session); a session
    // goes to the least busy and, if its tunnel fails before answering, to the next.
    for instance in instances.iter().take(2) {
        let path = if cancel {
            format!("/databases/{name}/{}", tunnel::DATABASE_CANCEL)
        } else {
            format!("/databases/{name}/")
        };
        let mut request = hyper::Request::new(Body::empty());
        *request.method_mut() = Method::CONNECT;
        *request.uri_mut() = match format!("https://bridge{path}").parse() {
            Ok(uri) => uri,
            Err(_) => return Err(Problem::not_found(format!("no database {name:?}"))),
        };
        request
            .extensions_mut()
            .insert(hyper::ext::Protocol::from_static(tunnel::DATABASE_PROTOCOL));
        let headers = request.headers_mut();
        for (k, v) in [
            (tunnel::HEADER_REQUEST_ID, uuid::Uuid::new_v4().to_string()),
            (tunnel::HEADER_PRINCIPAL, principal.key_id.clone()),
            (tunnel::HEADER_ORG, principal.org_id.to_string()),
        ] {
            if let Ok(v) = HeaderValue::from_str(&v) {
                headers.insert(k, v);
            }
        }
        let guard = InFlight::new(instance.clone());
        let mut sender = instance.sender.clone();
        let answered =
            tokio::time::timeout(state.forward_timeout, sender.send_request(request)).await;
        let mut response = match answered {
            Err(_) => {
                return Err(Problem::gateway_timeout(format!(
                    "bridge {bridge:?} did not answer within {} s (--forward-timeout)",
                    state.forward_timeout.as_secs()
                )));
            }
            Ok(Err(e)) => {
                tracing::warn!(bridge, instance = %instance.id, cause = %e, "database stream failed to open");
                last = e.to_string();
                continue;
            }
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            let status = response.status().as_u16();
            // A refusal is a short problem document: read at most 64 KiB of it.
            let limited = http_body_util::Limited::new(response.body_mut(), 64 * 1024);
            let body = tokio::time::timeout(state.forward_timeout, limited.collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let detail = crate::problem::detail_of(&body);
            return Err(match status {
                404 => Problem::not_found(detail),
                503 => Problem::unavailable(1, detail),
                _ => Problem::bad_gateway(format!(
                    "bridge {bridge:?} refused the stream ({status}): {detail}"
                )),
            });
        }
        return match hyper::upgrade::on(response).await {
            Ok(upgraded) => Ok(DatabaseStream {
                io: TokioIo::new(upgraded),
                instance: instance.id.clone(),
                _in_flight: guard,
            }),
            Err(e) => Err(Problem::bad_gateway(format!(
                "bridge {bridge:?} accepted the stream but it failed: {e}"
            ))),
        };
    }
    Err(Problem::bad_gateway(format!(
        "the tunnel to bridge {bridge:?} failed while opening the stream: {last}"
    )))
}
