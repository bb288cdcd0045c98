//! Passwords: hashed with Argon2id (the crate's defaults: 19 MiB, 2 passes), verified in
//! constant time by the crate, and an unknown account costs the same work as a wrong password.
//! Link and session secrets have 256 random bits, so only their SHA-256 is stored
//! ([`crate::secrets::new_secret`]).

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Argon2, PasswordHash};

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password accepted (hashing cost grows with it).
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// Hashed when an account does not exist or has no password yet, so that such a sign-in
/// costs what a wrong password does and timing tells nothing.
static DUMMY: std::sync::LazyLock<Option<String>> =
    std::sync::LazyLock::new(|| hash("not a password of anyone").ok());

/// Most Argon2 computations at once: each holds 19 MiB for tens of milliseconds, so a burst
/// of sign-ins waits here rather than taking hundreds of MiB on blocking threads.
const HASHING_AT_ONCE: usize = 4;
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHING_AT_ONCE);

/// [`verify`] on a blocking thread, at most [`HASHING_AT_ONCE`] at a time.
pub async fn verify_off_thread(password: String, stored: Option<String>) -> bool {
    let Ok(_permit) = HASHING.acquire().await else {
        return false;
    };
    tokio::task::spawn_blocking(move || verify(&password, stored.as_deref()))
        .await
        .unwrap_or(false)
}

/// [`hash`] on a blocking thread, at most [`HASHING_AT_ONCE`] at a time.
pub async fn hash_off_thread(password: String) -> Result<String, String> {
    let _permit = HASHING
        .acquire()
        .await
        .map_err(|e| format!("cannot hash the password: {e}"))?;
    tokio::task::spawn_blocking(move || hash(&password))
        .await
        .map_err(|e| format!("cannot hash the password: {e}"))?
}

/// An Argon2id PHC string for `password`, with a fresh random salt.
pub fn hash(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether `password` matches `stored` (a PHC string); `None` runs a dummy verification and
/// answers false.
pub fn verify(password: &str, stored: Option<&str>) -> bool {
    let (phc, real) = match stored {
        Some(s) => (s.to_string(), true),
        None => (DUMMY.clone().unwrap_or_default(), false),
    };
    let Ok(parsed) = PasswordHash::new(&phc) else {
        return false;
    };
    let ok = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    ok && real
}

/// Why a new password is refused, in words for the form.
pub fn check_new(password: &str, confirm: &str) -> Result<(), String> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(format!(
            "The password is too short: use at least {MIN_PASSWORD_CHARS} characters."
        ));
    }
    if chars > MAX_PASSWORD_CHARS {
        return Err(format!(
            "The password is too long: use at most {MAX_PASSWORD_CHARS} characters."
        ));
    }
    if password != confirm {
        return Err("The two passwords differ: type the same one twice.".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let stored = hash("correct horse battery").unwrap();
        assert!(stored.starts_with("$argon2id$"), "{stored}");
        assert!(verify("correct horse battery", Some(&stored)));
        assert!(!verify("correct horse batterz", Some(&stored)));
        assert!(!verify("correct horse battery", None));
        assert!(!verify("anything", Some("not a phc string")));
    }

    #[test]
    fn new_passwords_are_checked() {
        assert!(
            check_new("short", "short")
                .unwrap_err()
                .contains("at least 12")
        );
        assert!(
            check_new("long enough pw", "long enough px")
                .unwrap_err()
                .contains("differ")
        );
        assert!(check_new("long enough pw", "long enough pw").is_ok());
    }
}
