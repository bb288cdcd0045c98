//! The one door to the process environment.
//!
//! Everything in the configuration that reads an environment variable goes through [`Env`], so
//! tests hand in a [`MapEnv`] and never mutate the process environment.

use std::collections::HashMap;

/// `SERVICE_BRIDGE_TOKEN`: overrides `token`.
pub const TOKEN_VAR: &str = "SERVICE_BRIDGE_TOKEN";
/// `SERVICE_BRIDGE_NAME`: overrides `name`.
pub const NAME_VAR: &str = "SERVICE_BRIDGE_NAME";
/// `SERVICE_API_URL`: overrides `api_url`.
pub const API_URL_VAR: &str = "SERVICE_API_URL";
/// `SERVICE_LOG_LEVEL`: overrides `log_level`.
pub const LOG_LEVEL_VAR: &str = "SERVICE_LOG_LEVEL";
/// `SERVICE_HEARTBEAT_INTERVAL`: overrides `heartbeat_interval`.
pub const HEARTBEAT_INTERVAL_VAR: &str = "SERVICE_HEARTBEAT_INTERVAL";
/// `SERVICE_TLS_CA_FILE`: overrides `tls_ca_file` (a container mounts the CA where it likes).
pub const TLS_CA_FILE_VAR: &str = "SERVICE_TLS_CA_FILE";
/// Proxy fallbacks when the file has no `proxy_url`, in the order they are read (curl's order).
pub const HTTPS_PROXY_VARS: [&str; 2] = ["https_proxy", "HTTPS_PROXY"];
/// Hosts that bypass the proxy, in the order they are read.
pub const NO_PROXY_VARS: [&str; 2] = ["no_proxy", "NO_PROXY"];

/// A source of environment variables.
pub trait Env {
    /// The value of `name`, or `None` when it is unset (or not valid UTF-8).
    fn get(&self, name: &str) -> Option<String>;

    /// Like [`Env::get`], but an empty value counts as unset (container runtimes often pass
    /// `VAR=` for "not given").
    fn get_non_empty(&self, name: &str) -> Option<String> {
        self.get(name).filter(|value| !value.is_empty())
    }
}

/// The real process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// A fixed set of variables, for tests and for embedding.
#[derive(Debug, Clone, Default)]
pub struct MapEnv(HashMap<String, String>);

impl MapEnv {
    /// An environment with no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the environment with `name` set to `value`.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(name.into(), value.into());
        self
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for MapEnv {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl Env for MapEnv {
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}

impl Env for HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}
