//! koord-applier: makes the webhook's decisions real on a node. It holds no policy: it turns
//! `koordinator.sh/resolved-qos` (`docs/contract.md`, "## 6. The applier's side") into cgroup
//! writes, safely and idempotently, on cgroup v1 and v2, and reports what it did as Events and
//! metrics. The module map is in `docs/architecture.md`.
//!
//! The layout is the architecture: [`pod`] is the pod path (watch -> spec view -> plan ->
//! write -> Event), [`node`] the node loops (ancestors, QoS-class parents, NRI, reclaim,
//! colocation, NUMA, collectors, resctrl), [`cgroup`] the one door to the cgroup files (layout,
//! knob names, read-compare-write, systemd units), [`cmd`] the commands that wire them.
//! Dependencies point one way: [`cmd`] -> [`node`] and [`pod`] -> the pure core
//! ([`pod::plan`], [`cgroup::knob_map`], [`pod::events`], [`pod::report`], [`cgroup::layout`],
//! `node::ancestors::{plan, report}`) -> `koord_api`.
//! IO at the edge: [`cgroup::writer`], [`cgroup::detect`], [`pod::watch`] (kube watch),
//! [`event_sink`], [`server`], [`cgroup::systemd::dbus`] (systemd's manager over D-Bus).

pub mod cgroup;
pub mod cli;
pub mod cmd;
pub mod cpu_list;
pub mod event_sink;
pub mod fd_limit;
pub mod feature;
pub mod go_flags;
pub mod metrics;
pub mod node;
pub mod pod;
pub mod server;
