//! A string that must not end up in logs.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// A secret value (token, password). `Debug` and `Display` print `***`; the value is only
/// reachable through [`Secret::expose`], so every use of it is easy to find. `PartialEq`
/// compares whole configurations (a test's expected one); the bridge never checks a secret
/// presented to it, so no comparison here needs to run in constant time.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Call it only where the value is sent to its destination.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

/// The `Authorization` (or `Proxy-Authorization`) value of HTTP Basic for `user` and
/// `password`: what the bridge injects into forwarded requests, sends to a proxy, and tries in
/// `bridge check`. It carries the password: never log it.
pub fn basic_authorization(user: &str, password: &Secret) -> String {
    use base64::Engine;
    let pair = format!("{user}:{}", password.expose());
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(secret.to_string(), "***");
        assert_eq!(secret.expose(), "hunter2");
    }
}
