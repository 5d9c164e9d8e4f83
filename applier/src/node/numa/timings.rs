//! Where a locality pass spends its time. Every pass records it (one monotonic clock read per
//! phase, a few per container: nothing next to one `numa_maps` read); `once --timings` puts it
//! in the report and the worker logs it at debug level. Pure data.

use std::time::{Duration, Instant};

use serde::Serialize;

/// The phases of one container's pass, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerTimings {
    /// Where the container is and where its memory belongs: the cgroup path, `cgroup.procs`,
    /// the cpuset files and the processes' `status`.
    pub cgroup_micros: u64,
    /// Reading and summing every process's `numa_maps` before the move.
    pub numa_maps_before_micros: u64,
    /// The syscalls (`migrateMicros`).
    pub migrate_micros: u64,
    /// Reading `numa_maps` again after the move; 0 when no syscall was made (nothing was
    /// remote, so the first reading is the result).
    pub numa_maps_after_micros: u64,
}

/// The whole pass over a pod, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassTimings {
    /// `Migrator::run_pod` from its first instruction to its report: what `run`'s worker runs
    /// on its blocking thread for a due pod (the containers' phases are in each container).
    pub pass_micros: u64,
    /// Reading the NUMA nodes from sysfs.
    pub topology_micros: u64,
}

/// Microseconds since `since`, saturated.
pub fn micros_since(since: Instant) -> u64 {
    micros(since.elapsed())
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
