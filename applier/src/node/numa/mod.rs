//! Memory locality: move a pod's memory to the NUMA node its CPUs sit on, the reference's
//! "nearby memory access acceleration".
//!
//! - [`topology`]: sysfs nodes (the list format is [`crate::cpu_list`]).
//! - [`numa_maps`]: per-node pages of a process and the local ratio (pure).
//! - [`target`]: local and remote nodes of a container (pure).
//! - [`container`], [`message`], [`report`]: per-container outcomes, the Event texts and the
//!   `once` report (pure).
//! - [`migrate_sys`]: `migrate_pages(2)` / `move_pages(2)`, a syscall module with `unsafe`.
//! - [`locality`]: the pass over a pod's containers (IO).
//! - [`schedule`]: when a pod is due (on start, on annotation change, every interval).
//! - [`metrics`]: the metric families; [`worker`]: the pod cache scan inside `run`.
//! - [`timings`]: where a pass spends its time (`once --timings`, the worker's debug log).
//! - this file: the settings and [`MemoryLocality`], the node feature of `run`.
//!
//! The agent needs `hostPID` (the syscalls take PIDs of the caller's namespace and the PIDs in
//! `cgroup.procs` are read in it) and `CAP_SYS_NICE` (moving pages of other users' processes
//! and shared pages).

pub mod container;
pub mod locality;
pub mod message;
pub mod metrics;
pub mod migrate_sys;
pub mod numa_maps;
pub mod report;
pub mod schedule;
pub mod target;
#[cfg(test)]
mod test_pass;
pub mod timings;
pub mod topology;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use crate::feature::{FeatureError, NodeFeature, RunContext, Running};

/// Settings of the locality feature (`--locality-max-pages-per-second`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalityConfig {
    /// `None`: one `migrate_pages(2)` per process. `Some(n)`: `move_pages(2)` in batches, at
    /// most n pages per second, so a large heap never holds the process's mmap lock for long.
    pub max_pages_per_second: Option<u64>,
}

/// How often the worker looks at the pod cache for due pods.
const SCAN_PERIOD: Duration = Duration::from_secs(10);

/// The locality worker as a node feature of `run` (off in a dry run: it moves memory).
pub struct MemoryLocality {
    pub config: LocalityConfig,
}

impl NodeFeature for MemoryLocality {
    fn name(&self) -> &'static str {
        "memory locality"
    }

    fn changes_the_node(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let metrics = metrics::LocalityMetrics::register(ctx.metrics.registry())?;
        let migrator = locality::Migrator::new(
            ctx.layout.clone(),
            ctx.proc_root.clone(),
            ctx.sys_root.clone(),
            self.config,
        );
        Ok(Some(Running::task(tokio::spawn(
            worker::run(
                Arc::new(migrator),
                ctx.pods.clone(),
                ctx.events.clone(),
                Some(metrics),
                SCAN_PERIOD,
            )
            .instrument(tracing::info_span!("locality")),
        ))))
    }
}
