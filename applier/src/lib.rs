//! koord-applier: makes the webhook's decisions real on a node. It holds no policy: it turns
//! `koordinator.sh/resolved-qos` (DESIGN.md section 4) into cgroup writes, safely and
//! idempotently, on cgroup v1 and v2, and reports what it did as Events and metrics.
//!
//! Pure: [`cgroup::layout`], [`translate`], [`plan`], [`events`] texts. IO at the edge:
//! [`cgroup::writer`], [`cgroup::detect`], [`pods`] (kube watch), [`event_sink`], [`server`].

pub mod apply;
pub mod cgroup;
pub mod cli;
pub mod collectors;
pub mod colocation;
pub mod event_sink;
pub mod events;
pub mod metrics;
pub mod nodeqos;
pub mod numa;
pub mod once;
pub mod plan;
pub mod pods;
pub mod podview;
pub mod report;
pub mod resctrl;
pub mod run;
pub mod server;
pub mod translate;
