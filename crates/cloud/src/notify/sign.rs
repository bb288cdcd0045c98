//! Webhook signatures, as Stripe signs: `Signature: t=UNIX,v1=HEX`, where `v1` is the
//! HMAC-SHA256, keyed with the webhook's secret, of `t`, a dot and the raw body. The time
//! inside the signed text lets a receiver refuse replays of old deliveries.

use ring::hmac;

/// The `Signature` header's value for `body` sent at `t` (Unix seconds).
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", crate::secrets::hex(&mac(secret, t, body)))
}

fn mac(secret: &str, t: i64, body: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(t.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    ctx.sign().as_ref().to_vec()
}

/// What a receiver does (docs/notifications.md shows it in other languages): true when the
/// header carries a `v1` that matches and its `t` is within `tolerance` seconds of `now`.
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64, tolerance: i64) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => signatures.push(v.to_string()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    // Any `t` parses, `i64::MIN` too: the difference is taken without overflow.
    let tolerance = u64::try_from(tolerance).unwrap_or(0);
    if now
        .checked_sub(t)
        .is_none_or(|d| d.unsigned_abs() > tolerance)
    {
        return false;
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let signed = [t.to_string().as_bytes(), b".", body].concat();
    signatures
        .iter()
        .any(|s| unhex(s).is_some_and(|tag| hmac::verify(&key, &signed, &tag).is_ok()))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_hmac() {
        // `printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test`
        assert_eq!(
            signature("whsec_test", 1_700_000_000, br#"{"a":1}"#),
            "t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
    }

    #[test]
    fn verification_refuses_changes_and_old_times() {
        let header = signature("whsec_test", 1000, b"body");
        assert!(verify("whsec_test", &header, b"body", 1100, 300));
        assert!(!verify("whsec_test", &header, b"bodx", 1100, 300));
        assert!(!verify("whsec_other", &header, b"body", 1100, 300));
        assert!(!verify("whsec_test", &header, b"body", 2000, 300));
        assert!(!verify("whsec_test", "v1=00", b"body", 1000, 300));
        // The farthest times a header can name are refused, not an overflow.
        let header = format!("t={},v1=00", i64::MIN);
        assert!(!verify("whsec_test", &header, b"body", 1000, 300));
        let header = format!("t={},v1=00", i64::MAX);
        assert!(!verify("whsec_test", &header, b"body", -1000, 300));
    }
}
