//! koord-webhook: the mutating admission webhook of the memory QoS system. It holds all the
//! policy and writes the `koordinator.sh/resolved-qos` annotation (docs/contract.md).
//!
//! Pure parts: [`policy`] (the ConfigMaps, parsed and validated), [`resolve`] (the resolution
//! engine: a pod in, the resolved QoS and a change list out), [`mutation`] (the change list
//! as a JSON patch or applied to a manifest), [`pod_patch`] (one pod's answer, shared by
//! admission and the re-resolver) and [`admission`] (one AdmissionReview in, the response bytes
//! out). The two controllers, each one room with its pure core and its IO: [`reresolve`]
//! (stored pods brought up to date, under a Lease) and [`certs`] (the serving certificates,
//! generated or self-managed). What both read: [`live`] (the state admission reads and the
//! watches that keep it current), [`triggers`] (what the watches tell the re-resolver),
//! [`metrics`]. IO is thin around them: [`server`] (HTTP, TLS and connections only), [`cli`],
//! the commands ([`resolve_cmd`], [`doctor`]) and [`manifest`] (reading manifest files).
//! Leaves: [`duration`] (the flags' duration syntax), [`tls_config`] (rustls from PEM).
//! Dependencies point one way (docs/architecture.md; checked by tests/lib/module_graph.py):
//! server -> controllers -> live -> metrics -> admission -> pod_patch -> mutation -> resolve ->
//! policy -> manifest.

pub mod admission;
pub mod duration;
pub mod live;
pub mod metrics;
pub mod mutation;
pub mod pod_patch;
pub mod policy;
pub mod reresolve;
pub mod resolve;
pub mod tls_config;
pub mod triggers;

pub mod certs;
pub mod cli;
pub mod doctor;
pub mod manifest;
pub mod resolve_cmd;
pub mod server;
