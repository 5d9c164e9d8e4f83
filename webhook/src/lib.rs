//! koord-webhook: the mutating admission webhook of the memory QoS system. It holds all the
//! policy and writes the `koordinator.sh/resolved-qos` annotation (docs/contract.md).
//!
//! Pure parts: [`policy`] (the ConfigMaps, parsed and validated), [`resolve`] (the resolution
//! engine: a pod in, the resolved QoS and a change list out), [`mutation`] (the change list
//! as a JSON patch or applied to a manifest), [`pod_patch`] (one pod's answer, shared by
//! admission and the re-resolver) and [`admission`] (one AdmissionReview in, the response bytes
//! out). The two controllers, each one room with its pure core and its IO: [`reresolve`]
//! (stored pods brought up to date, under a Lease) and [`certs`] (the serving certificates,
//! generated or self-managed). IO is thin around them: [`server`] (HTTP, TLS and connections
//! only), [`cli`], the commands ([`resolve_cmd`], [`doctor`]) and [`manifest`] (reading
//! manifest files). Dependencies point one way: server -> controllers -> admission ->
//! pod_patch -> mutation -> resolve -> policy -> manifest.

pub mod admission;
pub mod live;
pub mod metrics;
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
