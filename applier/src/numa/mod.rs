//! Memory locality (issue #6): move a pod's memory to the NUMA node its CPUs sit on, the
//! reference's "nearby memory access acceleration".
//!
//! - [`topology`]: sysfs nodes and the kernel list format (pure parsing).
//! - [`numa_maps`]: per-node pages of a process and the local ratio (pure).
//! - [`target`]: local and remote nodes of a container (pure).
//! - [`message`], [`report`]: the Event texts and the `once` report (pure).
//! - [`migrate_sys`]: `migrate_pages(2)` / `move_pages(2)`, the crate's only unsafe code.
//! - [`locality`]: the pass over a pod's containers (IO).
//! - [`schedule`]: when a pod is due (on start, on annotation change, every interval).
//! - [`worker`]: the feature inside `run` (pod cache scan, Events, metrics).
//!
//! The agent needs `hostPID` (the syscalls take PIDs of the caller's namespace and the PIDs in
//! `cgroup.procs` are read in it) and `CAP_SYS_NICE` (moving pages of other users' processes
//! and shared pages).

pub mod locality;
pub mod message;
pub mod migrate_sys;
pub mod numa_maps;
pub mod report;
pub mod schedule;
pub mod target;
pub mod topology;
pub mod worker;

/// Settings of the locality feature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalityConfig {
    /// `None`: one `migrate_pages(2)` per process. `Some(n)`: `move_pages(2)` in batches, at
    /// most n pages per second, so a large heap never holds the process's mmap lock for long.
    pub max_pages_per_second: Option<u64>,
}
