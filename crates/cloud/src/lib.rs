//! `cloud`: the service side.
//!
//! Data flows `api` (HTTP, auth, problem+json) → `signals` (validate, normalise, rate-limit) →
//! `storage` (group commit to SQLite or PostgreSQL). `server` owns the listeners, TLS and
//! graceful shutdown; `admin` backs the key-minting commands; `metrics` defines every metric.
//! `relay` accepts bridge tunnels and forwards API consumers' requests through them.
//! Nothing here is shared with the bridge agent except through the `tunnel` crate.

pub mod admin;
pub mod api;
pub mod cli;
pub mod logging;
pub mod metrics;
pub mod relay;
pub mod secrets;
pub mod server;
pub mod shutdown;
pub mod signals;
pub mod stall;
pub mod storage;
pub mod tls;
