//! The tunnel contract shared by `cloud` and `bridge` (docs/bridge.md, "Tunnel protocol").
//!
//! What lives here: the paths and headers of the enrollment and connect handshake, the protocol
//! version rule, how resources are named on the wire, which headers belong to one hop, and the
//! TLS 1.3 configurations both sides build, the signals both stop on, and the `/metrics` text formats both answer in. What does not: any HTTP framework, storage, or the forwarding logic itself — the cloud
//! and the bridge each own their half, and this crate stays small enough to read in one sitting.

pub mod coalesce;
pub mod exposition;
pub mod handshake;
pub mod hop;
pub mod oci;
pub mod postgres;
pub mod repositories;
pub mod resource;
pub mod roots;
pub mod signals;
pub mod tls;

pub use handshake::*;
pub use resource::{
    MAX_RESOURCE_NAME_LEN, RESOURCE_NAME_RULE, ResourceInfo, ResourceKind, is_valid_resource_name,
};
