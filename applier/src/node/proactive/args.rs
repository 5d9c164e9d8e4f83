//! Flags of `run` for the proactive reclaim loop (flattened into its arguments).

use std::time::Duration;

use clap::ArgAction;

use super::cgroup::Slices;

#[derive(Debug, Clone, clap::Args)]
pub struct ProactiveArgs {
    /// Run the proactive reclaim loop (TMO/senpai-style: `memory.reclaim` while the
    /// container's `memory.pressure` stall stays under its target, never below its floor) for
    /// the containers whose annotation enables it (`proactiveReclaim.enabled`). Needs cgroup
    /// v2 with `memory.reclaim` (Linux 5.19+) and PSI; elsewhere each such pod gets an Event
    /// and nothing is done. `--proactive-reclaim=false` never runs it.
    #[arg(
        long,
        env = "KOORD_PROACTIVE_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub proactive_reclaim: bool,
    /// The longest one tick of the loop may spend writing `memory.reclaim`, all containers
    /// together (milliseconds, 1..=1000). Reclaims due past it wait for their next interval
    /// and are counted.
    #[arg(
        long,
        env = "KOORD_PROACTIVE_RECLAIM_WRITE_BUDGET_MS",
        default_value_t = 50
    )]
    pub proactive_reclaim_write_budget_ms: u64,
}

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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--proactive-reclaim-write-budget-ms {0} must be 1..=1000")]
    WriteBudget(u64),
}

impl TryFrom<&ProactiveArgs> for Settings {
    type Error = SettingsError;
    fn try_from(a: &ProactiveArgs) -> Result<Self, SettingsError> {
        if !(1..=1000).contains(&a.proactive_reclaim_write_budget_ms) {
            return Err(SettingsError::WriteBudget(
                a.proactive_reclaim_write_budget_ms,
            ));
        }
        Ok(Self {
            enabled: a.proactive_reclaim,
            write_budget: Duration::from_millis(a.proactive_reclaim_write_budget_ms),
            ..Self::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_budget_is_refused_out_of_range() {
        for (ms, want) in [
            (50, Ok(())),
            (1, Ok(())),
            (1000, Ok(())),
            (
                0,
                Err("--proactive-reclaim-write-budget-ms 0 must be 1..=1000"),
            ),
            (
                1001,
                Err("--proactive-reclaim-write-budget-ms 1001 must be 1..=1000"),
            ),
        ] {
            let a = ProactiveArgs {
                proactive_reclaim: true,
                proactive_reclaim_write_budget_ms: ms,
            };
            let got = Settings::try_from(&a)
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{ms} ms");
        }
    }
}
