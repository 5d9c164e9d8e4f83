//! Where a pod's cgroups live and how their files are read and written.
//!
//! `layout` and `kubelet_root` are pure (names and paths, the kubelet's `cgroupRoot`),
//! `readback` and `outcome` are pure (how a value reads back, what happened to a knob),
//! `detect` asks the kernel which hierarchy is mounted and where the kubelet's tree is,
//! `file` is the only code that opens, reads, lists or writes cgroup files (a read error is
//! never taken for an absent file), and `writer` reads, compares and writes the knobs of a
//! pass through it.

pub mod detect;
pub mod file;
pub mod knob_map;
pub mod kubelet_root;
pub mod layout;
pub mod outcome;
pub mod readback;
pub mod systemd;
pub mod writer;

pub use outcome::Outcome;

use serde::Serialize;

/// Which cgroup hierarchy the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

/// How the kubelet names its cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

/// A cgroup v1 controller (the mount point below the cgroup root). On v2 every file lives in the
/// one unified directory and the controller only matters for documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Controller {
    Memory,
    Cpu,
    /// `cpuset.cpus` (BE suppression, memory locality).
    Cpuset,
    /// `cpuacct.usage` and, on Alibaba Cloud Linux with `psi_v1=1`, the pressure files.
    Cpuacct,
    /// The directory perf's cgroup mode takes (CPI collector).
    PerfEvent,
    /// A hybrid host's cgroup2 mount (`unified/`, as systemd lays it out): no controllers of its
    /// own here, but runc and the kubelet create the kubepods tree in it and every directory has
    /// the pressure files (PSI collector).
    Unified,
}

impl Controller {
    pub fn dir_name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuset => "cpuset",
            Controller::Cpuacct => "cpuacct",
            Controller::PerfEvent => "perf_event",
            Controller::Unified => "unified",
        }
    }
}

impl std::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgroupDriver::Systemd => "systemd",
            CgroupDriver::Cgroupfs => "cgroupfs",
        })
    }
}
