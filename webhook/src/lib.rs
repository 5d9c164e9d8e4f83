//! koord-webhook: the mutating admission webhook of the memory QoS system.
//!
//! Pure policy lives in [`policy`] (ConfigMap parsing), [`resolve`] (the resolution engine) and
//! [`mutation`] (changes, JSON patch); IO (CLI, HTTP, watches) is thin around them.

pub mod mutation;
pub mod policy;
pub mod resolve;

pub mod certs;
pub mod cli;
pub mod manifest;
pub mod resolve_cmd;
pub mod server;
