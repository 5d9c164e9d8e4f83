//! Proactive reclaim (TMO/senpai-style, PSI-driven): for each container whose annotation
//! enables it (`proactiveReclaim.enabled`), every `intervalSeconds` the loop reads the
//! container's memory stall (`memory.pressure`, `some` total) and `memory.current`; while the
//! stall over the interval stays under `stallTargetMicros` it asks the kernel to reclaim a
//! step of the container's memory (`memory.reclaim`), never below the container's floor; at
//! or above the target it backs off. Cold memory leaves; the workload's stall says when to
//! stop. See docs/proactive-reclaim.md.
//!
//! Per container, not per pod: the floor is per container (as `memory.min` is), a hot sidecar
//! must not shield a cold main container (nor a cold one expose a hot one), and the stall is
//! read where the reclaim is written.
//!
//! - [`controller`]: the rule, pure (one interval's action and the state after).
//! - [`select`]: which containers of a pod, with what floor, or why not (pure; the Events).
//! - [`cgroup`]: what the node offers, the reads, the reclaim in slices that stops at the floor.
//! - [`worker`]: the loop over the node's containers and its thread.
//! - [`metrics`]; [`settings`]: the loop's settings; [`feature`]: the node feature of `run`.

pub mod cgroup;
pub mod controller;
mod feature;
pub mod metrics;
pub mod select;
mod settings;
pub mod worker;

pub use feature::ProactiveReclaim;
pub use metrics::ProactiveMetrics;
pub use settings::{SCAN_PERIOD, Settings};
pub use worker::{ProactiveLoop, TickReport};
