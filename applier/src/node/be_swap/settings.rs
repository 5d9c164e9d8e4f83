//! Settings of the BE swap grant (`run`'s `--be-swap-percent`).

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The share of each BE container's memory limit it may swap, percent; 0 = off.
    pub percent: u32,
    /// How often the pod cache and the grants are looked at (not a flag): a new BE container,
    /// swap turned on, or a grant reset by systemd or the kubelet is seen within it.
    pub period: Duration,
    /// The host's `/proc` (`meminfo`).
    pub proc_root: PathBuf,
}

/// A new BE container gets its grant within this.
pub const PERIOD: Duration = Duration::from_secs(5);

impl Default for Settings {
    /// Off.
    fn default() -> Self {
        Self {
            percent: 0,
            period: PERIOD,
            proc_root: PathBuf::from("/proc"),
        }
    }
}
