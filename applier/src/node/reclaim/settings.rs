//! Settings of the async reclaim emulations (`run`'s `--async-reclaim*`, `--be-first-*`).

use std::path::PathBuf;
use std::time::Duration;

/// Settings of the emulations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `memory.wmark_ratio` (async reclaim) emulated.
    pub enabled: bool,
    /// `memory.wmark_min_adj` (BE first under node pressure) emulated.
    pub be_first: bool,
    /// BE-first also throttles (`memory.high`) while the node is under its floor.
    pub throttle: bool,
    pub interval: Duration,
    pub cpu_percent: u32,
    /// Where `zoneinfo` is read (`--proc-root`).
    pub proc_root: PathBuf,
    /// One reclaim is written in slices of at most this many bytes
    /// ([`super::pace::Bounds::write_slice`]). Not a flag: a test sets `u64::MAX` to see each
    /// reclaim as one write in its fake `memory.reclaim`.
    pub write_slice: u64,
}

impl Default for Settings {
    /// Off (a `RunConfig` built in code starts no worker unless asked).
    fn default() -> Self {
        Self {
            enabled: false,
            be_first: false,
            throttle: false,
            interval: Duration::from_millis(100),
            cpu_percent: 5,
            proc_root: PathBuf::from("/proc"),
            write_slice: crate::node::shared::reclaim_slice::WRITE_SLICE,
        }
    }
}

impl Settings {
    /// Either emulation is on.
    pub fn any(&self) -> bool {
        self.enabled || self.be_first
    }
}
