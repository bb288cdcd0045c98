//! `GET /v1/bridge/connect`: a bridge proves itself twice (token and client certificate),
//! the connection is upgraded, and the cloud becomes the HTTP/2 client of the bridge over it.
//! Heartbeats and a revocation check run for as long as the tunnel lives.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls_pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;
use tunnel::ResourceInfo;
use tunnel::coalesce::Coalesced;

use super::Instance;
use super::RelayState;
use super::enroll::{BridgeCredential, authenticate_bridge, certificate_name};
use super::refusals::log_refusal;
use crate::problem::Problem;
use crate::problem::storage_unavailable;
use crate::storage::StorageError;

/// The verified client certificate of a TLS connection (leaf), put in each request's
/// extensions by the server loop. Absent on plain HTTP and for clients without one.
#[derive(Clone, Debug)]
pub struct ClientCert(pub CertificateDer<'static>);

pub use crate::auth::PeerAddr;

/// How often the tunnel's token is checked for revocation.
const REVOCATION_CHECK: Duration = Duration::from_secs(2);
/// Heartbeats missed in a row before a tunnel is dropped.
const MAX_MISSED_HEARTBEATS: u32 = 3;
/// The cloud pings each tunnel at least this often at the HTTP/2 level…
const PING_EVERY: Duration = Duration::from_secs(10);
/// …and drops one whose bridge does not answer within this long (or three heartbeat intervals,
/// when shorter): a frozen or cut-off instance would otherwise hold the requests sent to it
/// for three whole heartbeats (about two minutes at the default 30 s), and keep getting new ones.
const PING_ANSWER: Duration = Duration::from_secs(20);

fn refuse(mut problem: Problem, why: &str) -> Response {
    problem.detail = why.to_string();
    let mut response = problem.into_response();
    if let Ok(v) = HeaderValue::from_str(why) {
        response.headers_mut().insert(tunnel::HEADER_REFUSAL, v);
    }
    response
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether the client certificate names the token's bridge: `ORG_ID:BRIDGE` when the internal
/// CA signed it (enrollment), `ORG_SLUG:BRIDGE` when an operator's CA did (`--client-ca`). The
/// TLS handshake has already checked that it chains to one of them; which one is decided by
/// the internal CA's signature, never by the issuer's name.
async fn names_the_bridge(
    state: &RelayState,
    cert: &CertificateDer<'_>,
    credential: &BridgeCredential,
) -> Result<bool, StorageError> {
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Ok(false);
    };
    let Some(cn) = leaf
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
    else {
        return Ok(false);
    };
    if state.ca.issued(cert) {
        return Ok(cn == certificate_name(credential.org_id, &credential.bridge_name));
    }
    let Some((slug, bridge)) = cn.split_once(':') else {
        return Ok(false);
    };
    Ok(bridge == credential.bridge_name
        && state.store.org_id(slug).await? == Some(credential.org_id))
}

/// `GET /v1/bridge/connect`: 101 and the tunnel, or 400/401/403/426 with the reason in
/// `x-bridge-refusal` (the bridge logs it).
pub async fn connect(State(state): State<RelayState>, mut req: Request) -> Response {
    let peer = req.extensions().get::<PeerAddr>().copied();
    let headers = req.headers().clone();
    let refuse = |problem: Problem, why: &str| {
        log_refusal("connect", peer, &headers, problem.status, why);
        refuse(problem, why)
    };
    let credential = match authenticate_bridge(&state, &headers).await {
        Ok(c) => c,
        Err(p) => {
            let why = p.detail.clone();
            return refuse(p, &why);
        }
    };
    let Some(ClientCert(cert)) = req.extensions().get::<ClientCert>().cloned() else {
        let why = "a client certificate is required to open a tunnel (mutual TLS): the bridge enrolls for one by itself, or set tls_cert_file/tls_key_file";
        return refuse(Problem::unauthorized(why), why);
    };
    let named = match names_the_bridge(&state, &cert, &credential).await {
        Ok(named) => named,
        Err(e) => {
            let p = storage_unavailable(&e);
            let why = p.detail.clone();
            return refuse(p, &why);
        }
    };
    if !named {
        let why = "the client certificate was issued for another bridge than this token's (its subject CN must be ORG_ID:BRIDGE, the org's numeric id, when this cloud's own CA signed it, as enrollment does; ORG:BRIDGE, the org's slug, when a --client-ca CA did)";
        return refuse(Problem::forbidden(why), why);
    }
    let name = header_str(&headers, tunnel::HEADER_NAME).unwrap_or("");
    if let Some(why) = super::enroll::name_mismatch(&credential, name) {
        return refuse(Problem::forbidden(why.clone()), &why);
    }
    if let Err(why) =
        tunnel::check_protocol(header_str(&headers, tunnel::HEADER_PROTOCOL).unwrap_or(""))
    {
        return refuse(Problem::upgrade_required(why.clone()), &why);
    }
    if let Some(why) = state
        .registry
        .over_limit(credential.org_id, &credential.bridge_name)
    {
        return refuse(Problem::rate_limited(60, why.clone()), &why);
    }
    if headers.contains_key(tunnel::HEADER_CHECK) {
        tracing::info!(bridge = %credential.bridge_name, org_id = credential.org_id, "bridge check: a tunnel would be accepted (none opened)");
        return StatusCode::NO_CONTENT.into_response();
    }
    let upgrade_ok = header_str(&headers, header::UPGRADE.as_str())
        .is_some_and(|u| u.eq_ignore_ascii_case(tunnel::UPGRADE_PROTOCOL));
    if !upgrade_ok {
        let why = format!("send Upgrade: {}", tunnel::UPGRADE_PROTOCOL);
        return refuse(Problem::bad_request(why.clone()), &why);
    }
    let resources: Vec<ResourceInfo> = match header_str(&headers, tunnel::HEADER_RESOURCES)
        .map(serde_json::from_str::<Vec<ResourceInfo>>)
        .unwrap_or(Ok(Vec::new()))
    {
        Ok(mut r) => {
            // Globs as the bridge's config writes them (the header carries them encoded);
            // only a Git source's count.
            for resource in &mut r {
                resource.repositories = resource
                    .repositories
                    .take()
                    .filter(|_| resource.kind == tunnel::ResourceKind::Git)
                    .map(|globs| {
                        (globs.iter())
                            .map(|g| tunnel::repositories::decoded(g).into_owned())
                            .collect()
                    });
            }
            r
        }
        Err(e) => {
            let why = format!(
                "header {} is not a JSON resource list: {e}",
                tunnel::HEADER_RESOURCES
            );
            return refuse(Problem::bad_request(why.clone()), &why);
        }
    };
    let heartbeat = header_str(&headers, tunnel::HEADER_HEARTBEAT)
        .and_then(|h| h.parse::<u64>().ok())
        .map_or(Duration::from_secs(30), |h| {
            Duration::from_secs(h.clamp(1, 3600))
        });
    let instance_id = header_str(&headers, tunnel::HEADER_INSTANCE)
        .unwrap_or("unknown")
        .to_string();
    let version = header_str(&headers, tunnel::HEADER_VERSION)
        .unwrap_or("unknown")
        .to_string();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let tunnel = Tunnel {
                    credential,
                    instance_id,
                    version,
                    resources,
                    heartbeat,
                };
                run(state, tunnel, upgraded).await;
            }
            Err(e) => tracing::warn!(cause = %e, "bridge upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, tunnel::UPGRADE_PROTOCOL)
        .body(Body::empty())
        .unwrap_or_default()
}

struct Tunnel {
    credential: BridgeCredential,
    instance_id: String,
    version: String,
    resources: Vec<ResourceInfo>,
    heartbeat: Duration,
}

async fn run(state: RelayState, t: Tunnel, io: hyper::upgrade::Upgraded) {
    let severed = CancellationToken::new();
    let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(t.heartbeat.min(PING_EVERY))
        .keep_alive_timeout((t.heartbeat * MAX_MISSED_HEARTBEATS).min(PING_ANSWER))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(tunnel::STREAM_WINDOW)
        .initial_connection_window_size(tunnel::CONNECTION_WINDOW)
        .max_frame_size(tunnel::MAX_FRAME)
        .max_send_buf_size(tunnel::MAX_FRAME as usize * 4)
        .max_header_list_size(tunnel::MAX_TUNNEL_HEAD)
        .max_pending_accept_reset_streams(tunnel::MAX_RESET_STREAMS)
        .max_local_error_reset_streams(tunnel::MAX_RESET_STREAMS)
        .handshake::<_, Body>(TokioIo::new(super::severable::Severable::new(
            Coalesced::new(TokioIo::new(io)),
            severed.clone(),
        )))
        .await;
    let (sender, connection) = match handshake {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(bridge = %t.credential.bridge_name, cause = %e, "HTTP/2 handshake with bridge failed");
            return;
        }
    };
    let instance = Arc::new(Instance {
        id: t.instance_id.clone(),
        version: t.version.clone(),
        token_id: t.credential.token_id.clone(),
        resources: t.resources,
        connected_at: Utc::now(),
        last_heartbeat: std::sync::Mutex::new(Utc::now()),
        in_flight: AtomicUsize::new(0),
        sender,
        closed: state.shutdown.child_token(),
        severed,
        draining: std::sync::atomic::AtomicBool::new(false),
        revoking: std::sync::atomic::AtomicBool::new(false),
    });
    let (org_id, bridge) = (t.credential.org_id, t.credential.bridge_name.clone());
    // Instances of one bridge should serve the same resources; they differ during a rollout,
    // or when a name was reused for another site by mistake: said, not refused.
    let declares = |i: &Instance| {
        let mut names: Vec<String> = i
            .resources
            .iter()
            .map(|r| format!("{}/{}", r.kind, r.name))
            .collect();
        names.sort();
        names.join(" ")
    };
    if let Some(other) = state
        .registry
        .instances(org_id, &bridge)
        .into_iter()
        .find(|other| declares(other) != declares(&instance))
    {
        tracing::warn!(
            org_id,
            bridge = %bridge,
            instance = %t.instance_id,
            declares = %declares(&instance),
            other_instance = %other.id,
            other_declares = %declares(&other),
            "instances of this bridge declare different resources: each request goes to one that declares its resource; if this is not a rollout, give the other site's bridge a name of its own"
        );
    }
    // Tunnels that raced past the check at connect are closed here: at most the limits live.
    if let Some(why) = state.registry.add(org_id, &bridge, instance.clone()) {
        tracing::warn!(org_id, bridge = %bridge, instance = %t.instance_id, reason = %why, "bridge tunnel refused");
        return;
    }
    tracing::info!(org_id, bridge = %bridge, instance = %t.instance_id, version = %t.version, "bridge connected");
    // For the dashboard: a bridge that was connected, apart from a token only checked.
    let (store, token_id) = (state.store.clone(), t.credential.token_id.clone());
    tokio::spawn(async move {
        if let Err(e) = store.bridge_token_connected(&token_id).await {
            tracing::debug!(cause = %e, "cannot record a bridge token's connection");
        }
    });
    let watch = tokio::spawn(watch(
        state.clone(),
        t.credential.token_id.clone(),
        instance.clone(),
        t.heartbeat,
    ));
    tokio::select! {
        result = connection => {
            if let Err(e) = result {
                if e.is_timeout() {
                    tracing::warn!(bridge = %bridge, instance = %t.instance_id, "bridge tunnel dropped: the bridge did not answer a ping in time (the process is frozen or overloaded, or the network path is cut); its requests go to other instances");
                } else {
                    tracing::info!(bridge = %bridge, instance = %t.instance_id, cause = %e, "bridge tunnel ended");
                }
            }
        }
        _ = instance.closed.cancelled() => {}
    }
    instance.closed.cancel();
    watch.abort();
    state.registry.remove(org_id, &bridge, &instance);
    tracing::info!(org_id, bridge = %bridge, instance = %t.instance_id, "bridge disconnected");
}

/// Heartbeats through the tunnel and rechecks the token; cancels the tunnel when either fails.
/// A heartbeat in flight (it may wait up to `every`, an hour at most) never holds back the
/// token's recheck: a revocation closes the tunnel within seconds whatever the interval.
async fn watch(state: RelayState, token_id: String, instance: Arc<Instance>, every: Duration) {
    let mut beat = tokio::time::interval(every);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut revocation = tokio::time::interval(REVOCATION_CHECK);
    let mut missed = 0;
    let mut in_flight: Option<std::pin::Pin<Box<dyn Future<Output = bool> + Send>>> = None;
    loop {
        tokio::select! {
            _ = beat.tick(), if in_flight.is_none() => {
                let request = Request::builder()
                    .uri(tunnel::HEARTBEAT_PATH)
                    .body(Body::empty())
                    .unwrap_or_default();
                let mut sender = instance.sender.clone();
                in_flight = Some(Box::pin(async move {
                    matches!(
                        tokio::time::timeout(every, sender.send_request(request)).await,
                        Ok(Ok(r)) if r.status().is_success()
                    )
                }));
            }
            ok = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                in_flight = None;
                if ok {
                    missed = 0;
                    *instance.last_heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Utc::now();
                } else {
                    missed += 1;
                    if missed >= MAX_MISSED_HEARTBEATS {
                        tracing::warn!(instance = %instance.id, missed, "bridge missed heartbeats; dropping its tunnel");
                        instance.closed.cancel();
                        instance.severed.cancel();
                        return;
                    }
                }
            }
            _ = revocation.tick() => {
                if let Ok(Some(row)) = state.store.bridge_token(&token_id).await
                    && row.revoked
                {
                    // Said only when this check found it: a revocation from the dashboard
                    // closes the tunnel itself, at once.
                    if instance.close_revoked(&state.store).await {
                        tracing::warn!(org_id = row.org_id, bridge = %row.bridge_name, instance = %instance.id, "bridge token revoked; closed its tunnel");
                    }
                    return;
                }
            }
        }
    }
}
