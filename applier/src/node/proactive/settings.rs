//! Settings of the proactive reclaim loop (`run`'s `--proactive-reclaim*`).

use std::time::Duration;

use super::cgroup::Slices;

/// Settings of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// What one tick may spend writing `memory.reclaim`.
    pub write_budget: Duration,
    /// How a reclaim is cut (not a flag: a test sets no gap).
    pub slices: Slices,
    /// How often the pod cache is looked at for opted-in containers (not a flag).
    pub scan_period: Duration,
}

/// The pod cache is looked at this often: a changed annotation or a new container joins the
/// loop within it.
pub const SCAN_PERIOD: Duration = Duration::from_secs(5);

impl Default for Settings {
    /// Off (a `RunConfig` built in code starts no loop unless asked).
    fn default() -> Self {
        Self {
            enabled: false,
            write_budget: Duration::from_millis(50),
            slices: Slices::default(),
            scan_period: SCAN_PERIOD,
        }
    }
}
