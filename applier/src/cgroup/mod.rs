//! Where a pod's cgroups live and how their files are read and written.
//!
//! `layout` is pure (names and paths), `detect` asks the kernel which hierarchy is mounted,
//! `writer` is the only code that touches cgroup files.

pub mod detect;
pub mod layout;
pub mod writer;

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

/// A cgroup v1 controller (the mount point below the cgroup root). On v2 every knob lives in the
/// one unified directory and the controller only matters for documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    Memory,
    Cpu,
}

impl Controller {
    pub fn dir_name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
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
