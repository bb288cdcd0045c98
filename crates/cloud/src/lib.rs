//! `cloud`: the service side.
//!
//! Data flows `api` (the Signals API's handlers) → `signals` (validate, normalise,
//! rate-limit) → `storage` (group commit to SQLite or PostgreSQL). `relay` accepts bridge
//! tunnels and forwards API consumers' requests through them. Each feature owns its router
//! and state; `app` merges them, and the two share only `auth` (who is calling), `problem`
//! (RFC 9457 errors), `query` (query-string mistakes in one wording) and `storage`, never each
//! other's modules (`openapi` names the handlers of all, and they its answer types).
//!
//! `dashboard` serves the pages for people (sign-in, sessions) under `/`; `notify` sends
//! Bridge release notifications and strong suspects to org webhooks. Both see the relay's
//! tunnels only through `live` and correlation's answers only through `insight`, which `app`
//! implements over those features. `correlation` ranks the suspects of an alert and computes
//! the DORA figures.
//!
//! `cross_site` refuses what pages of other sites make a visitor's browser ask for; `edge` is
//! the layer around every route that applies it and times the request.
//! `server` owns the listeners, TLS and graceful shutdown; `admin` backs the key-minting
//! commands; `metrics` defines every metric. Nothing here is shared with the bridge agent
//! except through the `tunnel` crate.

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod body_budget;
pub mod cli;
pub mod correlation;
pub mod cross_site;
pub mod dashboard;
pub mod edge;
pub mod inputs;
pub mod insight;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod pgwire;
pub mod problem;
pub mod public_url;
pub mod query;
pub mod refused_body;
pub mod relay;
pub mod secrets;
pub mod server;
pub mod shutdown;
pub mod signals;
pub mod stall;
pub mod storage;
pub mod time;
pub mod tls;
