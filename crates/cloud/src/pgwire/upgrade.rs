//! `GET /v1/bridges/{bridge}/databases/{name}` with `Upgrade: postgresql`: the HTTPS way to a
//! database session, used by `cloud db-proxy`. The API key is checked before `101`; after it,
//! the connection carries a startup message (or a `CancelRequest`) and then the session, as on
//! the TLS port after the password.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tunnel::postgres::{FirstPacket, error_response, read_first_packet};

use super::session::{Session, serve};
use super::{ORG_UPGRADE_SESSIONS, PgState, STARTUP_TIMEOUT, UPGRADE_SESSIONS};
use crate::auth::PeerAddr;
use crate::problem::{PathParams, Problem};

/// The `Upgrade` token of the route.
pub const UPGRADE: &str = "postgresql";

/// The upgrade route, on both listeners.
pub fn router(state: PgState) -> Router {
    Router::new()
        .route("/v1/bridges/{bridge}/databases/{name}", get(upgrade))
        .with_state(state)
}

/// `GET /v1/bridges/{bridge}/databases/{name}` with `Connection: Upgrade` and
/// `Upgrade: postgresql` over HTTP/1.1: a PostgreSQL session on an HTTPS connection.
#[utoipa::path(get, path = "/v1/bridges/{bridge}/databases/{name}", tag = "bridges",
    params(("bridge" = String, Path), ("name" = String, Path, description = "The databases entry's name")),
    responses((status = 101, description = "Switching to the PostgreSQL protocol: the connection then carries a startup message (or a CancelRequest) and the session; refusals after this point are PostgreSQL ErrorResponses"),
        (status = 400, description = "No `Upgrade: postgresql` header, or not HTTP/1.1", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or a wrong API key", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The route has as many sessions open as it allows (1,024 in all, 512 for one org); `Retry-After: 1`", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn upgrade(
    State(state): State<PgState>,
    PathParams((bridge, database)): PathParams<(String, String)>,
    mut req: Request,
) -> Response {
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(UPGRADE));
    if !asked {
        return Problem::bad_request(format!(
            "this route opens a PostgreSQL session: send `Connection: Upgrade` and `Upgrade: {UPGRADE}` over HTTP/1.1 (cloud db-proxy does)"
        ))
        .into_response();
    }
    if req.version() != axum::http::Version::HTTP_11 {
        return Problem::bad_request(
            "a PostgreSQL session upgrades an HTTP/1.1 connection; this request came over another HTTP version",
        )
        .into_response();
    }
    let principal = match state
        .relay
        .keys
        .authenticate(&state.relay.store, req.headers())
        .await
    {
        Ok(principal) => principal,
        Err(problem) => return problem.into_response(),
    };
    let peer = req
        .extensions()
        .get::<PeerAddr>()
        .map_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0)), |p| p.0);
    let Some(slot) = state.upgrade_slot(principal.org_id) else {
        return Problem::unavailable(
            1,
            format!("this service has as many database sessions open through this route as it allows ({UPGRADE_SESSIONS} in all, {ORG_UPGRADE_SESSIONS} for one org); close some or retry shortly"),
        )
        .into_response();
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let sessions = state.sessions.clone();
    let stop = state.stop.clone();
    sessions.spawn(async move {
        let _slot = slot;
        let mut io = tokio::select! {
            upgraded = on_upgrade => match upgraded {
                Ok(upgraded) => TokioIo::new(upgraded),
                Err(_) => return,
            },
            () = stop.cancelled() => return,
        };
        // At shutdown a session still opening closes at once, saying why; a running one ends
        // itself.
        let spliced = std::sync::atomic::AtomicBool::new(false);
        let stopped = tokio::select! {
            () = upgraded(state, &mut io, principal, bridge, database, peer, &spliced) => false,
            () = super::session::stopped_while_opening(&stop, &spliced) => true,
        };
        if stopped {
            super::session::refuse_at_shutdown(&mut io).await;
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE));
    response
}

/// The session (or cancel) over the upgraded connection.
async fn upgraded(
    state: PgState,
    io: &mut TokioIo<hyper::upgrade::Upgraded>,
    principal: crate::auth::Principal,
    bridge: String,
    database: String,
    peer: std::net::SocketAddr,
    spliced: &std::sync::atomic::AtomicBool,
) {
    match tokio::time::timeout(STARTUP_TIMEOUT, read_first_packet(io)).await {
        Ok(Ok(FirstPacket::Startup { params, .. })) => {
            let target = Session {
                principal,
                bridge,
                database,
                peer,
            };
            serve(&state, io, &target, &params, spliced).await;
        }
        Ok(Ok(FirstPacket::Cancel(pid, key))) => {
            state
                .cancels
                .cancel(&state.relay, pid, key, Some(principal.org_id))
                .await;
        }
        Ok(Ok(other)) => {
            let message = format!("expected a startup message, got {other:?}");
            let _ = io.write_all(&error_response("08P01", &message)).await;
        }
        _ => {}
    }
}
