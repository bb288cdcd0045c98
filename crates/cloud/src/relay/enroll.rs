//! `POST /v1/bridge/enroll`: a bridge trades its token and a CSR for a short-lived client
//! certificate from the cloud's internal CA. The certificate names the org and the bridge
//! (`CN=<org id>:<bridge>`), whatever the CSR asked for.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::RelayState;
use crate::problem::Problem;
use crate::problem::storage_unavailable;
use crate::secrets::{self, Kind};
use crate::storage::Credential;

/// How long an enrolled client certificate is valid; bridges renew at two thirds.
pub const CLIENT_CERT_LIFETIME: time::Duration = time::Duration::hours(24);

/// A verified bridge token.
#[derive(Debug, Clone)]
pub struct BridgeCredential {
    /// The token's public id (rechecked for revocation while the tunnel lives).
    pub token_id: String,
    /// The org.
    pub org_id: i64,
    /// The bridge the token is for.
    pub bridge_name: String,
}

/// Checks `Authorization: Bearer <bridge token>`: known, matching hash, not revoked.
pub async fn authenticate_bridge(
    state: &RelayState,
    headers: &HeaderMap,
) -> Result<BridgeCredential, Problem> {
    // Two could be read differently by a proxy in front and by this service.
    if tunnel::hop::repeated(headers, header::AUTHORIZATION) {
        return Err(Problem::bad_request(
            "more than one Authorization header; send one: Authorization: Bearer <bridge token>",
        ));
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token))
        .ok_or_else(|| {
            Problem::unauthorized("missing bridge token: send Authorization: Bearer <bridge token>")
        })?;
    let rejected = || match secrets::named_kind(presented.trim()) {
        Some(other) if !presented.trim().starts_with(Kind::BridgeToken.prefix()) => {
            Problem::unauthorized(format!(
                "that is {other}, not a bridge token (sigbrt_…); create one with `cloud bridge-token create --org ORG --name BRIDGE`"
            ))
        }
        _ => Problem::unauthorized(
            "the bridge token is not valid; create one with `cloud bridge-token create --org ORG --name BRIDGE`",
        ),
    };
    let (id, secret) = secrets::parse(Kind::BridgeToken, presented.trim()).ok_or_else(rejected)?;
    let row = state
        .store
        .bridge_token(id)
        .await
        .map_err(|e| storage_unavailable(&e))?;
    let Some(row) = row else {
        let _ = secrets::verify(secret, &secrets::NO_HASH);
        return Err(rejected());
    };
    if !secrets::verify(secret, &row.secret_hash) {
        return Err(rejected());
    }
    if row.revoked {
        // The dashboard shows a bridge still trying with a revoked token as unauthorized.
        let (store, token_id) = (state.store.clone(), id.to_string());
        tokio::spawn(async move {
            if let Err(e) = store.bridge_token_refused(&token_id).await {
                tracing::debug!(cause = %e, "cannot record a refused bridge token");
            }
        });
        return Err(Problem::unauthorized(
            "the bridge token was revoked; create a new one with `cloud bridge-token create`",
        ));
    }
    // Its last use, for `cloud bridge-token list`: enrollments and connects are rare enough
    // to record each, without making the bridge wait for it.
    let (store, token_id) = (state.store.clone(), id.to_string());
    tokio::spawn(async move {
        if let Err(e) = store.touch(Credential::BridgeToken, &token_id).await {
            tracing::debug!(cause = %e, "cannot record a bridge token's last use");
        }
    });
    Ok(BridgeCredential {
        token_id: id.to_string(),
        org_id: row.org_id,
        bridge_name: row.bridge_name,
    })
}

/// The refusal of a bridge that calls itself `name` with a token made for another bridge:
/// its tunnel would serve the other bridge's callers, so neither enrollment nor connect
/// accepts it.
pub fn name_mismatch(credential: &BridgeCredential, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some(format!(
            "the bridge sent no name (x-bridge-name); this token is for bridge {:?}: set `name:` in its config (or SERVICE_BRIDGE_NAME) to that",
            credential.bridge_name
        ));
    }
    (name != credential.bridge_name).then(|| {
        format!(
            "this token is for bridge {:?}, not {name:?}: set the config's `name:` (or SERVICE_BRIDGE_NAME) to {:?}, or create a token for {name:?} with `cloud bridge-token create --org ORG --name {name}`",
            credential.bridge_name, credential.bridge_name
        )
    })
}

/// Largest CSR accepted (a PEM CSR is about 1 KiB).
const MAX_CSR_BYTES: usize = 64 * 1024;
/// How long the CSR may take to arrive.
const CSR_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The common name a bridge's client certificate carries.
pub fn certificate_name(org_id: i64, bridge: &str) -> String {
    format!("{org_id}:{bridge}")
}

/// Logs a refused enrollment and answers `problem`, once the request's unread body is
/// drained: an HTTP/2 client still sending it would otherwise read a reset stream, not the
/// answer.
async fn refused(
    peer: Option<crate::auth::PeerAddr>,
    headers: &HeaderMap,
    body: Body,
    problem: Problem,
) -> Response {
    super::refusals::log_refusal("enroll", peer, headers, problem.status, &problem.detail);
    crate::refused_body::drain_unread(headers, body).await;
    problem.into_response()
}

/// `POST /v1/bridge/enroll`: body is the CSR in PEM; answer `{"certificate","ca"}` in PEM,
/// or 400 (not a CSR), 401 (token), 403 (`x-bridge-name` is not the token's bridge), 503 (CA
/// unavailable).
pub async fn enroll(
    State(state): State<RelayState>,
    peer: Option<axum::Extension<crate::auth::PeerAddr>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let peer = peer.map(|axum::Extension(p)| p);
    // The token first: nobody without one makes the server read a body (only drain it).
    let credential = match authenticate_bridge(&state, &headers).await {
        Ok(c) => c,
        Err(p) => return refused(peer, &headers, body, p).await,
    };
    // Bridges since 0.1 name themselves here too, so `bridge check` finds a mismatch; an
    // older one is caught at connect.
    if let Some(name) = headers
        .get(tunnel::HEADER_NAME)
        .and_then(|v| v.to_str().ok())
        && let Some(why) = name_mismatch(&credential, name)
    {
        return refused(peer, &headers, body, Problem::forbidden(why)).await;
    }
    let read = tokio::time::timeout(
        CSR_READ_TIMEOUT,
        http_body_util::BodyExt::collect(http_body_util::Limited::new(body, MAX_CSR_BYTES)),
    )
    .await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Problem::too_large(format!(
                "a certificate signing request is at most {MAX_CSR_BYTES} bytes of PEM"
            ))
            .into_response();
        }
        Ok(Err(e)) => {
            return Problem::bad_request(format!(
                "could not read the certificate signing request: {e}"
            ))
            .into_response();
        }
        Err(_) => {
            return Problem::bad_request(format!(
                "the certificate signing request did not arrive within {CSR_READ_TIMEOUT:?}"
            ))
            .into_response();
        }
    };
    let Ok(body) = std::str::from_utf8(&body) else {
        return Problem::bad_request("the body is not a PEM certificate signing request")
            .into_response();
    };
    match issue(&state, &credential, body) {
        Ok((certificate, ca)) => {
            tracing::info!(org_id = credential.org_id, bridge = %credential.bridge_name, "bridge enrolled");
            (
                StatusCode::OK,
                axum::Json(json!({"certificate": certificate, "ca": ca})),
            )
                .into_response()
        }
        Err(p) => p.into_response(),
    }
}

fn issue(
    state: &RelayState,
    c: &BridgeCredential,
    csr_pem: &str,
) -> Result<(String, String), Problem> {
    let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| {
        Problem::bad_request(format!(
            "the body is not a PEM certificate signing request: {e}"
        ))
    })?;
    let mut params = rcgen::CertificateParams::default();
    // Random, positive, unique per certificate (rcgen would derive it from the public key,
    // so renewing with the same key would repeat it).
    let mut serial = *uuid::Uuid::new_v4().as_bytes();
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        certificate_name(c.org_id, &c.bridge_name),
    );
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + CLIENT_CERT_LIFETIME;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    csr.params = params;
    let cert = state.ca.sign_csr(&csr).map_err(|e| {
        tracing::error!(cause = %e, "cannot sign a bridge certificate");
        Problem::unavailable(5, "the certificate authority could not sign; retry shortly")
    })?;
    Ok((cert, state.ca.cert_pem.clone()))
}
