//! koord-applier: makes the webhook's decisions real on a node. It holds no policy: it turns
//! `koordinator.sh/resolved-qos` (`docs/contract.md`, "## 6. The applier's side") into cgroup
//! writes, safely and idempotently, on cgroup v1 and v2, and reports what it did as Events and
//! metrics. The module map is in `docs/architecture.md`.
//!
//! Dependencies point one way: [`cmd`] -> the features ([`numa`], [`collectors`],
//! [`colocation`]) and the cgroup passes ([`pods`], [`apply`], [`ancestors`], [`nodeqos`]) ->
//! the pure core ([`plan`], [`knob_map`], [`events`], [`report`], [`cgroup::layout`],
//! `ancestors::{plan, report}`) -> `koord_api`.
//! Pure: [`cgroup::layout`], [`cgroup::readback`], [`knob_map`], [`plan`], [`events`] texts.
//! IO at the edge: [`cgroup::writer`], [`cgroup::detect`], [`pods`] (kube watch),
//! [`event_sink`], [`server`], [`systemd::dbus`] (systemd's manager over D-Bus).

pub mod ancestors;
pub mod apply;
pub mod cgroup;
pub mod cli;
pub mod cmd;
pub mod collectors;
pub mod colocation;
pub mod cpu_list;
pub mod event_sink;
pub mod events;
pub mod fd_limit;
pub mod feature;
pub mod go_flags;
pub mod knob_map;
pub mod metrics;
pub mod nodeqos;
pub mod nri;
pub mod numa;
pub mod plan;
pub mod pod_event;
pub mod pod_phase;
pub mod pod_spec_view;
pub mod pods;
pub mod reclaim;
pub mod report;
pub mod resctrl;
pub mod server;
pub mod systemd;
