//! The token service of a registry with token auth, as the Docker token spec describes it.

use super::{PASSWORD, USER};

/// The `service` a token registry names in its challenge.
pub const TOKEN_SERVICE: &str = "test-registry";
/// The `iss` of the tokens it accepts.
pub const TOKEN_ISSUER: &str = "testkit-token-service";

/// A token service as the Docker token spec describes it: `GET /token?service=…&scope=…` with
/// [`USER`] and [`PASSWORD`] as Basic answers `{"token":…,"expires_in":300}`, a JWT signed
/// (ES256) by a key whose self-signed certificate rides in the token's `x5c` header and is
/// the registry's `rootcertbundle`.
pub struct TokenService {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub host: String,
    /// Token requests answered, refused ones included.
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Set, the next token is issued already expired (though its answer says 300 s), as a
    /// token the registry stops taking before its time.
    pub expire_next: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(super) cert_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Signer {
    key: ring::signature::EcdsaKeyPair,
    cert_der_b64: String,
}

impl TokenService {
    /// Starts on `127.0.0.1:0`.
    pub async fn start() -> Self {
        use base64::Engine;
        let key = rcgen::KeyPair::generate().expect("token key");
        let cert = rcgen::CertificateParams::new(vec!["token-service".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("token certificate");
        let rng = ring::rand::SystemRandom::new();
        let signer = std::sync::Arc::new(Signer {
            key: ring::signature::EcdsaKeyPair::from_pkcs8(
                &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                &key.serialize_der(),
                &rng,
            )
            .expect("ring key"),
            cert_der_b64: base64::engine::general_purpose::STANDARD.encode(cert.der()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        let expire_next = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let expire = expire_next.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (signer, counter, expire) = (signer.clone(), counter.clone(), expire.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let expired = expire.swap(false, std::sync::atomic::Ordering::SeqCst);
                        let answer = token_answer(&signer, &req, expired);
                        async move { Ok::<_, std::convert::Infallible>(answer) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        TokenService {
            url: format!("http://{addr}"),
            host: addr.to_string(),
            requests,
            expire_next,
            cert_pem: cert.pem(),
            task,
        }
    }
}

fn token_answer(
    signer: &Signer,
    req: &hyper::Request<hyper::body::Incoming>,
    expired: bool,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    use base64::Engine;
    let respond = |status: u16, body: String| {
        let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
        *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let sent = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if sent != Some(expected.as_str()) {
        return respond(401, r#"{"details":"wrong login"}"#.to_string());
    }
    let query = req.uri().query().unwrap_or("");
    let access: Vec<serde_json::Value> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "scope")
        .filter_map(|(_, scope)| {
            let mut parts = scope.rsplitn(2, ':');
            let actions = parts.next()?;
            let (kind, name) = parts.next()?.split_once(':')?;
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - if expired { 600 } else { 0 };
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [signer.cert_der_b64]});
    let claims = serde_json::json!({
        "iss": TOKEN_ISSUER, "sub": USER, "aud": TOKEN_SERVICE,
        "exp": now + 300, "nbf": now - 10, "iat": now,
        "jti": uuid::Uuid::new_v4().to_string(), "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = signer
        .key
        .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
        .expect("sign");
    let token = format!("{signing_input}.{}", b64(signature.as_ref()));
    respond(
        200,
        serde_json::json!({"token": token, "access_token": token, "expires_in": 300}).to_string(),
    )
}
