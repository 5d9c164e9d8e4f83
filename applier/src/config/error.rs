//! The one error of building a [`super::Config`].

use crate::node::collectors::GateError;

/// A flag out of its range, named with the range it must be in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A malformed `--feature-gates` (checked first: refused before anything starts).
    #[error(transparent)]
    Gates(#[from] GateError),
    #[error("collector intervals and the CPI window must be at least 1 second")]
    CollectorInterval,
    #[error(
        "--collect-cpi-timewindow-seconds ({window}) exceeds --cpi-collector-interval-seconds ({interval})"
    )]
    CpiWindow { window: u64, interval: u64 },
    #[error("--collect-serve: {0}")]
    CollectServe(String),
    #[error("--metrics-addr {0:?} is not host:port or :port")]
    Addr(String),
    #[error("--resync-seconds must be at least 1")]
    Resync,
    #[error("--{0} must be a number of seconds in 0.1..=3600")]
    ColocationInterval(&'static str),
    #[error("--be-suppress-min-cpus must be in 0..=1024")]
    MinCpus,
    #[error("--metrics-{flag}-timeout-seconds must be between 1 and 300, got {got}")]
    EndpointTimeout { flag: &'static str, got: u64 },
    #[error("--nri-plugin-index {0:?} must be two digits (00..=99)")]
    NriIndex(String),
    #[error("--nri-answer-deadline-ms must be in 10..=1900 (the runtime waits 2000 ms by default)")]
    NriDeadline,
    #[error("--nri-pod-wait-ms must be in 0..=1000")]
    NriPodWait,
    #[error("--async-reclaim-interval-ms {0} must be 10..=10000")]
    ReclaimInterval(u64),
    #[error("--async-reclaim-cpu-percent {0} must be 1..=100")]
    ReclaimCpuPercent(u32),
    #[error("--proactive-reclaim-write-budget-ms {0} must be 1..=1000")]
    WriteBudget(u64),
    #[error("--be-swap-percent {0} must be 0..=100")]
    BeSwapPercent(u32),
}
