//! koord-webhook: the mutating admission webhook of the memory QoS system. It holds all the
//! policy and writes the `koordinator.sh/resolved-qos` annotation (docs/contract.md).
//!
//! Pure parts: [`policy`] (the ConfigMaps, parsed and validated), [`resolve`] (the resolution
//! engine: a pod in, the resolved QoS and a change list out), [`mutation`] (the change list
//! as a JSON patch or applied to a manifest), [`pod_patch`] (one pod's answer, shared by
//! admission and the re-resolver) and [`reresolve`] (what re-resolving stored pods changes, and
//! when). IO is thin around them: [`cli`], the commands ([`server`], [`resolve_cmd`],
//! [`certs`], [`doctor`]) and [`manifest`] (reading manifest files).
//! Dependencies point one way: commands -> reresolve -> pod_patch -> mutation -> resolve ->
//! policy -> manifest.

pub mod mutation;
pub mod pod_patch;
pub mod policy;
pub mod reresolve;
pub mod resolve;

pub mod certs;
pub mod cli;
pub mod doctor;
pub mod manifest;
pub mod resolve_cmd;
pub mod server;
