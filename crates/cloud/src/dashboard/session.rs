//! Sessions and CSRF. A session is a random id in the `signals_session` cookie (`HttpOnly`,
//! `SameSite=Lax`, `Secure` over TLS) whose SHA-256 finds the stored row; it ends after
//! [`IDLE`] without use or [`ABSOLUTE`] after sign-in, at sign-out, or everywhere when the
//! password changes. Every form carries a CSRF token: the session's own once signed in, and
//! before that (sign-in, set-password) one that must match the `signals_csrf` cookie.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};

use crate::storage::{Session, StorageError, Store, now_micros};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "signals_session";
/// Name of the pre-session CSRF cookie.
pub const CSRF_COOKIE: &str = "signals_csrf";
/// A session unused this long is over.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// A session is over this long after sign-in, however busy.
pub const ABSOLUTE: Duration = Duration::from_secs(7 * 24 * 3600);
/// `last_seen_at` is written at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

/// A `Set-Cookie` value: `HttpOnly`, path `/`, `Secure` when served over TLS.
pub fn set_cookie(
    name: &str,
    value: &str,
    same_site: &str,
    max_age: Duration,
    secure: bool,
) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path=/; HttpOnly; SameSite={same_site}; Max-Age={}{secure}",
        max_age.as_secs()
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The live session of this request's cookie, if any; expired ones are ended on the way.
pub async fn current(
    store: &Store,
    headers: &HeaderMap,
) -> Result<Option<(Session, Vec<u8>)>, StorageError> {
    let Some(id) = cookie(headers, SESSION_COOKIE) else {
        return Ok(None);
    };
    let id_hash = crate::secrets::hash(id);
    let Some(session) = store.session(&id_hash).await? else {
        return Ok(None);
    };
    let now = now_micros();
    let idle = now - session.last_seen_at > micros(IDLE);
    let old = now - session.created_at > micros(ABSOLUTE);
    if idle || old {
        store.end_session(&id_hash).await?;
        return Ok(None);
    }
    if now - session.last_seen_at > micros(TOUCH_EVERY) {
        store.touch_session(&id_hash).await?;
    }
    Ok(Some((session, id_hash)))
}

/// Starts a session for `user_id` whose password hash is still `vouched` (the one verified or
/// set): the cookie's value to set, or `None` when the password changed meanwhile.
pub async fn start(
    store: &Store,
    user_id: i64,
    vouched: &str,
) -> Result<Option<String>, StorageError> {
    let (id, id_hash) = crate::secrets::new_secret();
    let (csrf, _) = crate::secrets::new_secret();
    let started = store
        .create_session(&id_hash, user_id, &csrf, vouched)
        .await?;
    Ok(started.then_some(id))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; signals_session=xyz"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("signals_csrf=abc"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, CSRF_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), None);
    }

    #[test]
    fn secure_only_over_tls() {
        let tls = set_cookie("n", "v", "Lax", ABSOLUTE, true);
        assert!(tls.to_str().unwrap().ends_with("; Secure"));
        let plain = set_cookie("n", "v", "Lax", ABSOLUTE, false);
        assert!(!plain.to_str().unwrap().contains("Secure"));
        assert!(plain.to_str().unwrap().contains("HttpOnly; SameSite=Lax"));
    }
}
