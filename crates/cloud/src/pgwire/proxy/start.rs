//! `db-proxy`'s start: every option checked at once, the port bound, then the cloud asked
//! what a session would need.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::net::TcpListener;

use super::dial::{Dialer, Unreached, dialer};
use super::{ProxyError, ProxyOptions};

/// Checks every option (the key, `--listen`, `--api-url`, `--ca-file`) and binds the port,
/// saying each problem at once rather than the first.
pub(super) fn prepare(opts: &ProxyOptions) -> Result<(Dialer, TcpListener), Vec<ProxyError>> {
    let mut problems = Vec::new();
    match &opts.api_key {
        // Keys are printable ASCII: anything else is a paste gone wrong (a space inside, a
        // zero-width or no-break space), which the cloud would refuse at every session.
        Ok(key) if !key.bytes().all(|b| b.is_ascii_graphic()) => {
            problems.push(ProxyError::ApiKeyChars)
        }
        Ok(_) => {}
        Err(true) => problems.push(ProxyError::BlankApiKey),
        Err(false) => problems.push(ProxyError::NoApiKey),
    }
    // The CA file is read for an `https://` cloud only: plain HTTP to loopback uses none.
    let roots = match opts
        .ca_file
        .as_ref()
        .filter(|_| opts.api_url.scheme() == "https")
    {
        Some(path) => match crate::tls::load_certificates(path) {
            Ok(certs) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(certs);
                Some(roots)
            }
            Err(e) => {
                problems.push(ProxyError::Ca(path.clone(), e.to_string()));
                None
            }
        },
        None => Some(tunnel::roots::public()),
    };
    if !tunnel::is_valid_bridge_name(&opts.bridge) {
        let name = opts.bridge.clone();
        problems.push(ProxyError::Name("--bridge", name, tunnel::BRIDGE_NAME_RULE));
    }
    if !tunnel::is_valid_resource_name(&opts.database) {
        let name = opts.database.clone();
        problems.push(ProxyError::Name(
            "--database",
            name,
            tunnel::RESOURCE_NAME_RULE,
        ));
    }
    // `--api-url` is checked even when the CA file is not read.
    let roots = roots.unwrap_or_else(rustls::RootCertStore::empty);
    let dialer = dialer(opts, roots).map_err(|e| problems.push(e)).ok();
    let listener = if opts.listen.ip().is_loopback() {
        bind(opts.listen).map_err(|e| problems.push(e)).ok()
    } else {
        problems.push(ProxyError::NotLoopback(opts.listen));
        None
    };
    match (dialer, listener) {
        (Some(dialer), Some(listener)) if problems.is_empty() => Ok((dialer, listener)),
        _ => Err(problems),
    }
}

/// The local port, bound at once (so that a taken port is said with the other problems).
fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| ProxyError::Listen(addr, e))?;
    TcpListener::from_std(listener).map_err(|e| ProxyError::Listen(addr, e))
}

/// How long the check at start may take in all before db-proxy listens anyway.
pub(super) const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the cloud, at start, what a session would: whether it vouches for the cloud's
/// certificate and accepts the key (else db-proxy exits, as for any bad flag), and whether the
/// bridge is connected and declares the database (a warning: it may connect later). A cloud
/// that cannot be reached is a warning too: it may be starting.
pub(super) async fn preflight(dialer: &Dialer, opts: &ProxyOptions) -> Result<(), ProxyError> {
    let base = opts.api_url.path().trim_end_matches('/');
    let request = dialer
        .request(&format!("{base}/v1/bridges"), false)
        .map_err(|e| ProxyError::Preflight(format!("cannot form a request to the cloud: {e}")))?;
    let response = match dialer.exchange(request).await {
        Err(Unreached::Tls(why)) => {
            return Err(ProxyError::Preflight(format!(
                "--api-url {}: TLS to the cloud failed: {why}; give --ca-file the CA that signs the cloud's certificate (data/ca.pem for its self-signed one)",
                opts.api_url
            )));
        }
        Err(Unreached::Other(why)) => {
            tracing::warn!(api_url = %opts.api_url, cause = %why, "cannot reach the cloud; listening anyway, sessions fail until it can be reached");
            return Ok(());
        }
        Ok(response) => response,
    };
    let status = response.status().as_u16();
    let body = http_body_util::Limited::new(response.into_body(), 4 << 20)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match status {
        200 => {}
        401 => {
            return Err(ProxyError::Preflight(format!(
                "the cloud at {} refused CLOUD_API_KEY: {} (it must be a key of the org that owns bridge {:?})",
                opts.api_url,
                crate::problem::detail_of(&body),
                opts.bridge
            )));
        }
        _ => {
            tracing::warn!(api_url = %opts.api_url, status, detail = %crate::problem::detail_of(&body), "the cloud's check at start failed; listening anyway");
            return Ok(());
        }
    }
    let listed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let bridge = listed["bridges"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["name"] == opts.bridge.as_str());
    let Some(bridge) = bridge else {
        tracing::warn!(bridge = %opts.bridge, "the org has no bridge of this name connected to the cloud right now (not created, not running, or reconnecting); sessions fail until it connects");
        return Ok(());
    };
    let declares = bridge["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["resources"].as_array().into_iter().flatten())
        .any(|r| r["kind"] == "database" && r["name"] == opts.database.as_str());
    if !declares {
        tracing::warn!(bridge = %opts.bridge, database = %opts.database, "the bridge is connected but declares no such entry in its `databases` list; sessions fail until it does");
    }
    Ok(())
}
