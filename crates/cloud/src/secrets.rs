//! Credentials: how signal keys, API keys and bridge tokens look, are made and are checked.
//!
//! API keys and bridge tokens read `PREFIX_ID_SECRET`: the prefix tells secret scanners and
//! humans what leaked, the id finds the stored row, and only the SHA-256 of the secret is
//! stored. The secret has 256 random bits, so a fast hash is enough (no password stretching);
//! the comparison is constant-time all the same.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Which kind of credential a string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Authenticates API calls (`Authorization: Bearer …`).
    ApiKey,
    /// Authenticates a bridge's tunnel.
    BridgeToken,
}

impl Kind {
    /// The recognisable prefix of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::ApiKey => "sigapi_",
            Kind::BridgeToken => "sigbrt_",
        }
    }
}

/// Prefix of signal keys (an address, not a secret: it goes in the URL path).
pub const SIGNAL_KEY_PREFIX: &str = "sigkey_";

/// What a presented value is, by its prefix, when it is one of this service's credentials:
/// so that a key given where another kind belongs is named as such (and, being a secret, not
/// echoed back).
pub fn named_kind(presented: &str) -> Option<&'static str> {
    [
        (Kind::ApiKey.prefix(), "an API key"),
        (Kind::BridgeToken.prefix(), "a bridge token"),
        (SIGNAL_KEY_PREFIX, "a signal key"),
    ]
    .into_iter()
    .find(|(prefix, _)| presented.starts_with(prefix))
    .map(|(_, name)| name)
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex(&buf)
}

/// `bytes` in lowercase hex: how secrets, digests and MACs are written everywhere in `cloud`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The HMAC-SHA256 of `message` under `key`, in hex: a value only a holder of the key could
/// have made (internal keys, the dashboard's notices).
pub fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    hex(ring::hmac::sign(&key, message).as_ref())
}

/// A new signal key.
pub fn new_signal_key() -> String {
    format!("{SIGNAL_KEY_PREFIX}{}", random_hex(12))
}

/// Prefix of webhook signing secrets.
pub const WEBHOOK_SECRET_PREFIX: &str = "whsec_";

/// A new webhook signing secret (256 random bits). Unlike the credentials above it is stored
/// as is: the cloud signs with it, and it grants nothing on this service.
pub fn new_webhook_secret() -> String {
    format!("{WEBHOOK_SECRET_PREFIX}{}", random_hex(32))
}

/// A freshly made credential: show `token` once, store `id` and `hash`.
pub struct Minted {
    /// The whole credential, to print once.
    pub token: String,
    /// The public part, the row's key.
    pub id: String,
    /// SHA-256 of the secret part.
    pub hash: Vec<u8>,
}

/// Makes a new credential of a kind.
pub fn mint(kind: Kind) -> Minted {
    let id = random_hex(8);
    let secret = random_hex(32);
    Minted {
        token: format!("{}{id}_{secret}", kind.prefix()),
        hash: hash(&secret),
        id,
    }
}

/// SHA-256 of a secret: the stored form of an API key's, a bridge token's, a sign-in link's
/// or a session's secret.
pub fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// The length of a secret [`new_secret`] makes: 32 bytes in unpadded base64url.
pub const SECRET_CHARS: usize = 43;

/// A new random secret (256 bits, URL-safe base64) and its [`hash`], which is what is stored:
/// a sign-in or password link's token, a session id, a CSRF token.
pub fn new_secret() -> (String, Vec<u8>) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let hash = hash(&secret);
    (secret, hash)
}

/// Splits a presented credential into (id, secret) when it is of the expected kind and shape.
pub fn parse(kind: Kind, token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(kind.prefix())?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, 16) && hex(secret, 64)).then_some((id, secret))
}

/// The hash a presented secret is checked against when its id matches no stored row, so that
/// an unknown id costs the same work as a wrong secret and the answer's time tells nothing.
pub const NO_HASH: [u8; 32] = [0; 32];

/// A secret held in memory whose `Debug` shows none of it: the settings that carry one derive
/// `Debug`, and a debug print of them must not leak it.
#[derive(Clone)]
pub struct Hidden(pub String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(…)")
    }
}

/// Equal in constant time (the length aside): a presented token, CSRF value or MAC against
/// the one expected, so that the answer's time tells nothing of how much of it was right.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Constant-time check of a presented secret against a stored hash.
pub fn verify(secret: &str, stored_hash: &[u8]) -> bool {
    hash(secret).ct_eq(stored_hash).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_stored_hashed() {
        let (a, ha) = new_secret();
        let (b, _) = new_secret();
        assert_ne!(a, b);
        assert_eq!(a.len(), SECRET_CHARS);
        assert_eq!(ha, hash(&a));
    }

    #[test]
    fn minted_tokens_verify_and_others_do_not() {
        let m = mint(Kind::ApiKey);
        assert!(m.token.starts_with("sigapi_"));
        let (id, secret) = parse(Kind::ApiKey, &m.token).unwrap();
        assert_eq!(id, m.id);
        assert!(verify(secret, &m.hash));
        let other = mint(Kind::ApiKey);
        let (_, other_secret) = parse(Kind::ApiKey, &other.token).unwrap();
        assert!(!verify(other_secret, &m.hash));
    }

    #[test]
    fn kinds_are_not_interchangeable() {
        let m = mint(Kind::BridgeToken);
        assert!(parse(Kind::ApiKey, &m.token).is_none());
        assert!(parse(Kind::BridgeToken, &m.token).is_some());
        assert!(parse(Kind::ApiKey, "sigapi_short_x").is_none());
    }
}
