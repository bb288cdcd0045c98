//! The bridge agent (docs/bridge.md): an on-premise process that dials out to `cloud`, keeps a
//! reverse HTTP/2 tunnel open, and forwards the cloud's requests to the internal resources
//! declared in its configuration, injecting their credentials.
//!
//! # Architecture
//!
//! - [`config`]: the typed configuration: YAML file, `${NAME}` expansion, environment
//!   overrides, and a validation that reports every problem at once. Everything else takes a
//!   [`config::Config`]; nothing else reads the environment or the file.
//! - [`audit`]: the hash-chained audit log written for every forwarded request, and its
//!   verifier (`bridge audit verify`).
//! - [`state`]: the enrolled certificate kept in `state_dir` across restarts.
//! - [`healthcheck`]: `bridge healthcheck`, a probe of a running bridge's `/health` for
//!   container images that have no shell or curl.
//! - [`ca`]: the CA files given for internal servers (`tls_ca_file`, `sslrootcert`); without
//!   one, the public CAs of [`tunnel::roots`] (system, else embedded).
//! - [`check`]: `bridge check`, each declared resource reached once with its credentials.
//! - [`postgres`]: the bridge's PostgreSQL client side (TLS and SCRAM towards a database).
//! - [`backoff`]: reconnect delays (exponential, full jitter, reset after a minute up, slow
//!   retry for a rejected token). Pure computation; the connection loop does the sleeping.
//!
//! - [`run`] wires a process: [`logging`], [`health`] (`/livez`, `/health`, `/metrics`),
//!   [`agent`] (the reconnect loop over [`dial`] and [`identity`]), [`forward`] (the HTTP/2
//!   service that reaches declared resources, within [`rules`] and under [`memory`]'s
//!   `max_memory_mb`), [`reachability`] (the periodic resource checks behind `degraded`),
//!   [`status`] and [`metrics`].
//!
//! Data flows config → connection loop (back-off) → tunnel (HTTP/2 server) → forwarder →
//! resource, with one audit record per request. The wire contract shared with `cloud`
//! (handshake headers, resource addressing) belongs in the `tunnel` crate, not here; nothing
//! here may depend on the cloud's storage or web code.

/// `println!` for the commands whose output is read by people and scripts (`check`, `audit
/// verify`): a reader that stops early (`| head -1`) ends the output, not the process with a
/// panic; the exit code still says what was found.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod agent;
pub mod audit;
pub mod backoff;
pub mod ca;
pub mod check;
pub mod config;
pub mod dial;
pub mod forward;
pub mod health;
pub mod healthcheck;
pub mod identity;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod postgres;
pub mod reachability;
pub mod rules;
pub mod run;
pub mod state;
pub mod status;

/// This build's version, reported in `/health`, logs and the handshake.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
