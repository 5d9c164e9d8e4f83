//! Flags of `run` for the async reclaim emulation (flattened into its arguments).

use std::path::PathBuf;
use std::time::Duration;

use clap::ArgAction;

#[derive(Debug, Clone, clap::Args)]
pub struct ReclaimArgs {
    /// Where the kernel has no `memory.wmark_*` (every mainline kernel) but has
    /// `memory.reclaim` (5.19+), keep each container whose annotation asks for async reclaim
    /// (`memory.wmark_ratio` > 0) below its `wmark_high` by writing `memory.reclaim`, as the
    /// Alibaba kernel's background worker does. `--async-reclaim=false` reports the knob
    /// unsupported instead.
    #[arg(
        long,
        env = "KOORD_ASYNC_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub async_reclaim: bool,
    /// Where the kernel has no `memory.wmark_min_adj` but has `memory.reclaim`: when the node's
    /// free memory nears the kernel's watermarks, reclaim from the containers whose annotation
    /// has a positive `memory.wmark_min_adj` (BE, 50 by default) before the kernel's global
    /// reclaim reaches the others (LS). `--be-first-reclaim=false` reports the knob
    /// unsupported instead.
    #[arg(
        long,
        env = "KOORD_BE_FIRST_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub be_first_reclaim: bool,
    /// With BE-first on: while the node's free memory is below the Alibaba kernel's throttle
    /// point for the adjustment (`min + (low - min) * adj / 100` of the zones' watermarks),
    /// also hold each such container's growth with `memory.high` at its usage (never below 32
    /// MiB or its `memory.min`), as that kernel throttles those allocations; released with the
    /// value before put back once free memory is at the `high` watermark again.
    /// `--be-first-throttle=false` only reclaims.
    #[arg(
        long,
        env = "KOORD_BE_FIRST_THROTTLE",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub be_first_throttle: bool,
    /// How often each such container's `memory.current` (and the node's `/proc/zoneinfo`) is
    /// read (milliseconds).
    #[arg(long, env = "KOORD_ASYNC_RECLAIM_INTERVAL_MS", default_value_t = 100)]
    pub async_reclaim_interval_ms: u64,
    /// The reclaim worker's CPU budget (both emulations): percent of one core, per second
    /// (1..=100). Reclaims
    /// due past it wait for the next second and are counted.
    #[arg(long, env = "KOORD_ASYNC_RECLAIM_CPU_PERCENT", default_value_t = 5)]
    pub async_reclaim_cpu_percent: u32,
}

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
            write_slice: super::pace::WRITE_SLICE,
        }
    }
}

impl Settings {
    /// Either emulation is on.
    pub fn any(&self) -> bool {
        self.enabled || self.be_first
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--async-reclaim-interval-ms {0} must be 10..=10000")]
    Interval(u64),
    #[error("--async-reclaim-cpu-percent {0} must be 1..=100")]
    CpuPercent(u32),
}

impl TryFrom<&ReclaimArgs> for Settings {
    type Error = SettingsError;
    fn try_from(a: &ReclaimArgs) -> Result<Self, SettingsError> {
        if !(10..=10_000).contains(&a.async_reclaim_interval_ms) {
            return Err(SettingsError::Interval(a.async_reclaim_interval_ms));
        }
        if !(1..=100).contains(&a.async_reclaim_cpu_percent) {
            return Err(SettingsError::CpuPercent(a.async_reclaim_cpu_percent));
        }
        Ok(Self {
            enabled: a.async_reclaim,
            be_first: a.be_first_reclaim,
            throttle: a.be_first_reclaim && a.be_first_throttle,
            interval: Duration::from_millis(a.async_reclaim_interval_ms),
            cpu_percent: a.async_reclaim_cpu_percent,
            proc_root: PathBuf::from("/proc"),
            write_slice: super::pace::WRITE_SLICE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(interval: u64, cpu: u32) -> ReclaimArgs {
        ReclaimArgs {
            async_reclaim: true,
            be_first_reclaim: true,
            be_first_throttle: true,
            async_reclaim_interval_ms: interval,
            async_reclaim_cpu_percent: cpu,
        }
    }

    #[test]
    fn out_of_range_values_are_refused_by_name_and_range() {
        let cases: [(u64, u32, Result<(), &str>); 6] = [
            (100, 5, Ok(())),
            (10, 1, Ok(())),
            (10_000, 100, Ok(())),
            (
                9,
                5,
                Err("--async-reclaim-interval-ms 9 must be 10..=10000"),
            ),
            (100, 0, Err("--async-reclaim-cpu-percent 0 must be 1..=100")),
            (
                100,
                101,
                Err("--async-reclaim-cpu-percent 101 must be 1..=100"),
            ),
        ];
        for (interval, cpu, want) in cases {
            let got = Settings::try_from(&args(interval, cpu))
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{interval} ms, {cpu}%");
        }
    }
}
