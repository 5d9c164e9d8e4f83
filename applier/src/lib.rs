//! koord-applier: makes the webhook's decisions real on a node. It holds no policy: it turns
//! `koordinator.sh/resolved-qos` (`docs/contract.md`, "## 6. The applier's side") into cgroup
//! writes, safely and idempotently, on cgroup v1 and v2, and reports what it did as Events and
//! metrics. The module map is in `docs/architecture.md`.
//!
//! The translating core (spec view -> plan -> write -> Event text, and the cgroup files) is
//! the crate `koord_translator`; this crate is the node agent around it: [`pod`] the pod
//! watch that feeds it, [`node`] the node features (ancestors, QoS-class parents, NRI,
//! reclaim, colocation, NUMA, collectors, resctrl), [`cmd`] the commands that wire them.
//! Dependencies point one way: [`cmd`] -> [`node`] and [`pod`] -> `koord_translator` ->
//! `koord_api`. The flags ([`cli`], the parse layer) become one [`config::Config`], which the
//! commands and features read. A feature that takes part in a pod's pass does so through the translator's
//! `ContainerHooks` (the async-reclaim emulation, wired in `cmd::run`); the others read the
//! pass's report.
//! Every node feature starts the one way, a [`feature::NodeFeature`] in the one list of
//! `cmd::features`.
//! IO at the edge: [`pod::watch`] (kube watch), [`event_sink`], [`server`], and the node
//! features' own loops.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod cpu_list;
pub mod event_sink;
pub mod feature;
pub mod go_flags;
pub mod metrics;
pub mod node;
pub mod pod;
pub mod server;
