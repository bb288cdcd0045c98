//! The bridge's TLS identity: whom it trusts (`tls_ca_file`, the system roots, or nobody with
//! `tls_verify: false`) and its client certificate — from `tls_cert_file`/`tls_key_file`, or by
//! enrollment (`POST /v1/bridge/enroll`: token + CSR in, short-lived certificate out), renewed
//! when two thirds of its life have passed. A renewal only changes the next connection, so
//! traffic on the current tunnel is never dropped for it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tunnel::tls::Trust;

use crate::config::Config;
use crate::dial::{self, DialError};

/// Why the bridge could not get a usable TLS identity or tunnel.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The cloud could not be reached.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// The cloud rejected the token.
    #[error("token rejected by the cloud: {0}")]
    Unauthorized(String),
    /// The cloud refused for another reason (version, name, …), or something in front of it
    /// answered a 5xx.
    #[error("{}", refused(*status, reason))]
    Refused {
        /// HTTP status.
        status: u16,
        /// The cloud's explanation.
        reason: String,
    },
    /// Local TLS files or configuration are unusable.
    #[error("TLS setup: {0}")]
    Tls(String),
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(String),
    /// The cloud ended the TLS connection with an alert about the bridge's client certificate
    /// (its CA was rotated, or the certificate is not one it signed).
    #[error(
        "the cloud refused the bridge's client certificate (TLS alert {0}): an enrolled one is dropped and enrolled again; one from tls_cert_file must be signed by the cloud's CA, or by a CA the cloud was given with --client-ca"
    )]
    CertificateRefused(String),
}

/// What belongs in `tls_ca_file`, for its errors.
const CA_HINT: &str = "give the cloud's CA certificate (ca.pem in the cloud's --data-dir), or leave tls_ca_file out for a cloud whose certificate a public CA signed";

/// Trust anchors from the configuration.
pub fn trust(cfg: &Config) -> Result<Trust, AgentError> {
    if !cfg.tls_verify {
        return Ok(Trust::Anyone);
    }
    let roots = match &cfg.tls_ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    AgentError::Tls(format!(
                        "{} {}: {e}; {CA_HINT}",
                        cfg.tls_ca_file_origin,
                        path.display()
                    ))
                })?;
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(AgentError::Tls(format!(
                    "{} {}: no usable PEM CA certificate in it; {CA_HINT}",
                    cfg.tls_ca_file_origin,
                    path.display()
                )));
            }
            roots
        }
        None => tunnel::roots::public(),
    };
    Ok(Trust::Roots(roots))
}

struct Cert {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    renew_at: SystemTime,
    /// Read from `state_dir` and not yet accepted by the cloud on this run.
    unproven: bool,
    /// Enrolled (now or on an earlier run), not the operator's `tls_cert_file`: it may be
    /// dropped and enrolled again.
    enrolled: bool,
}

/// Holds the current client certificate and makes TLS configs with it.
pub struct Identity {
    cfg: Arc<Config>,
    current: Mutex<Option<Cert>>,
}

fn renew_at(der: &CertificateDer<'_>) -> SystemTime {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return SystemTime::now();
    };
    let from = cert.validity().not_before.timestamp();
    let to = cert.validity().not_after.timestamp();
    let at = from + (to - from) * 2 / 3;
    SystemTime::UNIX_EPOCH + Duration::from_secs(at.max(0) as u64)
}

/// The bridge name a certificate the cloud issued is for: its common name is `ORG_ID:NAME`.
fn issued_for(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(cn.split_once(':')?.1.to_string())
}

/// The certificate saved in `state_dir`, while it is not yet due for renewal and is for this
/// bridge's `name` (a renamed bridge, or two sharing a directory, would otherwise present
/// another bridge's certificate and be refused before enrolling).
fn saved_cert(dir: &std::path::Path, name: &str) -> Option<Cert> {
    let saved = crate::state::load(dir)?;
    let for_name = issued_for(saved.chain.first()?);
    if for_name.as_deref() != Some(name) {
        tracing::info!(state_dir = %dir.display(), saved_for = for_name.as_deref().unwrap_or("?"), name, "the client certificate saved in state_dir is for another bridge name; enrolling for this one");
        return None;
    }
    let renew_at = renew_at(saved.chain.first()?);
    if SystemTime::now() >= renew_at {
        return None;
    }
    tracing::info!(state_dir = %dir.display(), "using the client certificate saved in state_dir");
    Some(Cert {
        chain: saved.chain,
        key: saved.key,
        renew_at,
        unproven: true,
        enrolled: true,
    })
}

impl Identity {
    /// Loads `tls_cert_file`/`tls_key_file` when configured, else a certificate saved in
    /// `state_dir`; otherwise enrolls lazily.
    pub fn new(cfg: Arc<Config>) -> Result<Self, AgentError> {
        let current = match (&cfg.tls_cert_file, &cfg.tls_key_file) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| {
                        AgentError::Tls(format!("tls_cert_file {}: {e}", cert.display()))
                    })?;
                let key_path = key;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| AgentError::Tls(format!("tls_key_file {}: {e}", key.display())))?;
                // rustls checks that the key is the certificate's only when it builds a TLS
                // config: at start, not at every reconnect.
                tunnel::tls::client_config(
                    tunnel::tls::Trust::Anyone,
                    Some((chain.clone(), key.clone_key())),
                )
                .map_err(|e| {
                    AgentError::Tls(format!(
                        "tls_cert_file {} and tls_key_file {} do not go together ({e}): give the key the certificate was made for, and the certificate first in its file",
                        cert.display(),
                        key_path.display()
                    ))
                })?;
                Some(Cert {
                    chain,
                    key,
                    renew_at: SystemTime::now() + Duration::from_secs(100 * 365 * 24 * 3600),
                    unproven: false,
                    enrolled: false,
                })
            }
            _ => cfg
                .state_dir
                .as_deref()
                .and_then(|dir| saved_cert(dir, &cfg.name)),
        };
        Ok(Identity {
            cfg,
            current: Mutex::new(current),
        })
    }

    fn plain_config(&self) -> Result<Arc<ClientConfig>, AgentError> {
        tunnel::tls::client_config(trust(&self.cfg)?, None)
            .map_err(|e| AgentError::Tls(e.to_string()))
    }

    /// A TLS config with a valid client certificate, enrolling or renewing first when needed.
    pub async fn client_config(&self) -> Result<Arc<ClientConfig>, AgentError> {
        let due = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(|c| SystemTime::now() >= c.renew_at);
        if due {
            let cert = self.enroll().await?;
            *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(cert);
            tracing::info!("client certificate obtained by enrollment");
        }
        let guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let cert = guard
            .as_ref()
            .ok_or_else(|| AgentError::Tls("no client certificate".into()))?;
        tunnel::tls::client_config(
            trust(&self.cfg)?,
            Some((cert.chain.clone(), cert.key.clone_key())),
        )
        .map_err(|e| AgentError::Tls(e.to_string()))
    }

    /// The cloud accepted the certificate (a tunnel opened with it).
    pub fn accepted(&self) {
        if let Some(cert) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            cert.unproven = false;
        }
    }

    /// A tunnel attempt failed with `error`. When the cloud was reached and still no tunnel
    /// opened, a certificate saved in `state_dir` that it has not accepted yet is dropped (it
    /// may come from another cloud or CA), so the next attempt enrolls; so is any enrolled
    /// certificate the cloud refused in TLS (its CA was rotated since). A cloud that cannot be
    /// reached (DNS, TCP, proxy, time-out) says nothing about the certificate: it is kept.
    /// The operator's `tls_cert_file` is always kept. Returns whether a certificate was
    /// dropped, so that the next attempt enrolls.
    pub fn attempt_failed(&self, error: &AgentError) -> bool {
        if let AgentError::CertificateRefused(alert) = error {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            let Some(cert) = current.take_if(|c| c.enrolled) else {
                return false;
            };
            if let Some(dir) = &self.cfg.state_dir {
                crate::state::forget(dir);
            }
            if cert.unproven {
                tracing::info!(alert = %alert, "the certificate saved in state_dir did not open a tunnel; enrolling again");
            } else {
                tracing::info!(alert = %alert, "the cloud refused the enrolled client certificate (was its CA rotated?); enrolling again");
            }
            return true;
        }
        let unreached = matches!(
            error,
            AgentError::Dial(
                DialError::Dns { .. }
                    | DialError::Tcp { .. }
                    | DialError::ProxyRefused { .. }
                    | DialError::Proxy { .. }
                    | DialError::Timeout { .. }
            )
        );
        if unreached {
            return false;
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| c.unproven) {
            *current = None;
            if let Some(dir) = &self.cfg.state_dir {
                crate::state::forget(dir);
            }
            tracing::info!(
                "the certificate saved in state_dir did not open a tunnel; enrolling again"
            );
            return true;
        }
        false
    }

    /// Time until the current certificate is due for renewal.
    pub fn renew_in(&self) -> Option<Duration> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| {
                c.renew_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default()
            })
    }

    /// Proves the token to the cloud without keeping anything: an enrollment whose certificate
    /// is thrown away (`bridge check`). `Unauthorized` when the cloud rejects the token.
    pub async fn prove_token(&self) -> Result<(), AgentError> {
        self.enrollment().await.map(|_| ())
    }

    async fn enroll(&self) -> Result<Cert, AgentError> {
        let (pem, key_pem) = self.enrollment().await?;
        let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AgentError::Tls(format!("enrolled certificate: {e}")))?;
        let first = chain
            .first()
            .ok_or_else(|| AgentError::Tls("enroll returned no certificate".into()))?;
        let renew_at = renew_at(first);
        if let Some(dir) = &self.cfg.state_dir
            && let Err(e) = crate::state::save(dir, &pem, &key_pem)
        {
            tracing::warn!(state_dir = %dir.display(), cause = %e, "cannot save the client certificate in state_dir; it will be enrolled again after a restart");
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| AgentError::Tls(e.to_string()))?;
        Ok(Cert {
            chain,
            key,
            renew_at,
            unproven: false,
            enrolled: true,
        })
    }

    /// One enrollment exchange: a new key pair and CSR out, the certificate (PEM) and the
    /// key (PEM) back.
    async fn enrollment(&self) -> Result<(String, String), AgentError> {
        let key = rcgen::KeyPair::generate().map_err(|e| AgentError::Tls(e.to_string()))?;
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, self.cfg.name.clone());
        let csr = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| AgentError::Tls(e.to_string()))?;
        let (status, body) = request(
            &self.cfg,
            self.plain_config()?,
            hyper::Request::post(tunnel::ENROLL_PATH)
                .header(
                    "authorization",
                    format!("Bearer {}", self.cfg.token.expose()),
                )
                .header("content-type", "application/x-pem-file")
                .header(tunnel::HEADER_NAME, self.cfg.name.as_str()),
            Bytes::from(csr),
        )
        .await?;
        if status == 401 || status == 403 {
            return Err(AgentError::Unauthorized(problem_detail(&body)));
        }
        if status != 200 {
            return Err(AgentError::Refused {
                status,
                reason: problem_detail(&body),
            });
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| AgentError::Http(format!("enroll answer: {e}")))?;
        let pem = answer["certificate"].as_str().unwrap_or("").to_string();
        Ok((pem, key.serialize_pem()))
    }
}

/// The `detail` of a problem+json body, or the body as text.
pub fn problem_detail(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            let text: String = String::from_utf8_lossy(body).chars().take(300).collect();
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        })
}

/// [`AgentError::Refused`] in words: a 5xx is most often a proxy or load balancer in front of
/// the cloud that cannot reach it, not the cloud's refusal.
fn refused(status: u16, reason: &str) -> String {
    if status >= 500 {
        format!(
            "api_url answered HTTP {status}, not the cloud's tunnel: a proxy or load balancer in front of the cloud cannot reach it, or the cloud is failing ({reason})"
        )
    } else {
        format!("the cloud refused the tunnel ({status}): {reason}")
    }
}

/// How long one enrollment exchange may take.
const ENROLL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One HTTP/1.1 request to the cloud on a fresh TLS connection; returns status and body.
async fn request(
    cfg: &Config,
    tls: Arc<ClientConfig>,
    builder: http::request::Builder,
    body: Bytes,
) -> Result<(u16, Bytes), AgentError> {
    tokio::time::timeout(ENROLL_TIMEOUT, request_unbounded(cfg, tls, builder, body))
        .await
        .map_err(|_| {
            AgentError::Http(format!(
                "enrollment: the cloud did not answer within {ENROLL_TIMEOUT:?}"
            ))
        })?
}

async fn request_unbounded(
    cfg: &Config,
    tls: Arc<ClientConfig>,
    builder: http::request::Builder,
    body: Bytes,
) -> Result<(u16, Bytes), AgentError> {
    let (stream, authority) = dial::cloud(cfg, tls).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| AgentError::Http(e.to_string()))?;
    tokio::spawn(conn);
    let req = builder
        .header("host", authority)
        .body(Full::new(body))
        .map_err(|e| AgentError::Http(e.to_string()))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| AgentError::Http(e.to_string()))?;
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| AgentError::Http(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests;
