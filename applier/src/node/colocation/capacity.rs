//! Pure formulas of colocation: how much of the node can be lent to BE pods, when that number
//! is worth patching into the Node, and when it must fall to 0.
//!
//! Units: CPU in milli-cores, memory in bytes, both `i64`; intermediates in `i128`.

use std::time::Duration;

use super::config::{ColocationConfig, MemoryPolicy};

/// A CPU + memory amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

impl Resources {
    pub const ZERO: Resources = Resources {
        cpu_milli: 0,
        memory_bytes: 0,
    };

    pub fn new(cpu_milli: i64, memory_bytes: i64) -> Self {
        Self {
            cpu_milli,
            memory_bytes,
        }
    }
}

/// What the node knows at one moment, aggregated over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityInput {
    /// The Node's `status.allocatable` cpu / memory.
    pub allocatable: Resources,
    /// Whole-node usage (/proc/stat busy time; MemTotal - MemAvailable).
    pub node_usage: Resources,
    /// The sum over every pod on the node (BE included) of its cgroup usage.
    pub pods_usage: Resources,
    /// The sum over non-BE pods of their usage (a pod without a sample counts its request).
    pub non_be_usage: Resources,
    /// The sum over non-BE pods of their requests.
    pub non_be_request: Resources,
}

/// `node - pods`, never negative: what the kubelet, runtime, daemons and kernel use.
pub fn system_usage(input: &CapacityInput) -> Resources {
    Resources {
        cpu_milli: (input.node_usage.cpu_milli - input.pods_usage.cpu_milli).max(0),
        memory_bytes: (input.node_usage.memory_bytes - input.pods_usage.memory_bytes).max(0),
    }
}

fn percent_of(v: i64, pct: i64) -> i128 {
    i128::from(v) * i128::from(pct) / 100
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v.max(0)).unwrap_or(i64::MAX)
}

/// `batch = allocatable x reclaim% - (non-BE usage, or request per policy) - system usage`,
/// floored at 0. CPU always counts usage (Koordinator's `cpuCalculatePolicy: usage`); memory
/// follows `memoryCalculatePolicy`.
pub fn batch_capacity(cfg: &ColocationConfig, input: &CapacityInput) -> Resources {
    let sys = system_usage(input);
    let cpu = percent_of(
        input.allocatable.cpu_milli,
        cfg.cpu_reclaim_threshold_percent,
    ) - i128::from(input.non_be_usage.cpu_milli)
        - i128::from(sys.cpu_milli);
    let hp_memory = match cfg.memory_calculate_policy {
        MemoryPolicy::Usage => input.non_be_usage.memory_bytes,
        MemoryPolicy::Request => input.non_be_request.memory_bytes,
    };
    let memory = percent_of(
        input.allocatable.memory_bytes,
        cfg.memory_reclaim_threshold_percent,
    ) - i128::from(hp_memory)
        - i128::from(sys.memory_bytes);
    Resources {
        cpu_milli: clamp(cpu),
        memory_bytes: clamp(memory),
    }
}

/// True when `new` moved away from `old` by more than `threshold x old` (Koordinator's
/// `IsResourceDiff`). From 0, any non-zero value is a move.
pub fn moved(old: i64, new: i64, threshold: f64) -> bool {
    if old == 0 {
        return new != 0;
    }
    let diff = (i128::from(new) - i128::from(old)).unsigned_abs() as f64;
    diff > threshold * (old.unsigned_abs() as f64)
}

/// Why the Node is (or is not) patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateDecision {
    /// The Node lacks one of the batch resources, or they differ between capacity and
    /// allocatable.
    Missing,
    /// A resource moved more than `resourceDiffThreshold`.
    Moved,
    /// Nothing moved enough but `updateTimeThresholdSeconds` passed since the last patch (or we
    /// never patched since starting).
    Expired,
    /// Leave the Node alone.
    Skip,
}

impl UpdateDecision {
    pub fn patch(self) -> bool {
        !matches!(self, Self::Skip)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Moved => "moved",
            Self::Expired => "expired",
            Self::Skip => "skip",
        }
    }
}

/// Patch when the Node lacks the values, a value moved more than the threshold, or the last
/// patch is older than `updateTimeThreshold`. Equal values are never patched (nothing to say).
pub fn update_decision(
    cfg: &ColocationConfig,
    on_node: Option<Resources>,
    new: Resources,
    since_last_patch: Option<Duration>,
) -> UpdateDecision {
    let Some(old) = on_node else {
        return UpdateDecision::Missing;
    };
    if old == new {
        return UpdateDecision::Skip;
    }
    let t = cfg.resource_diff_threshold;
    if moved(old.cpu_milli, new.cpu_milli, t) || moved(old.memory_bytes, new.memory_bytes, t) {
        return UpdateDecision::Moved;
    }
    match since_last_patch {
        Some(age) if age < cfg.update_time_threshold => UpdateDecision::Skip,
        _ => UpdateDecision::Expired,
    }
}

/// The batch resources are degraded to 0 when the newest usage data is older than
/// `degradeTimeMinutes` (or there is none): lending on stale data would overcommit blindly.
pub fn degraded(cfg: &ColocationConfig, usage_age: Option<Duration>) -> bool {
    usage_age.is_none_or(|age| age > cfg.degrade_time)
}

/// What the Node should advertise now: disabled or degraded -> 0 (the operator's or the
/// reference's withdrawal), else the formula, never less than `committed`, the batch requests
/// of the pods already bound to the node. The kubelet admits a pod against the Node's
/// allocatable: a formula that fell below what the scheduler already placed there (LS usage
/// swinging up) would make the kubelet reject a pod for capacity the applier itself withdrew
/// (`OutOfkubernetes.io/batch-memory`). The floor promises nothing new: with the formula below
/// it no further BE pod fits, and the BE pods already running are the suppression's and the
/// BE-first reclaim's to squeeze.
pub fn advertised(
    cfg: &ColocationConfig,
    input: Option<&CapacityInput>,
    usage_age: Option<Duration>,
    committed: Resources,
) -> Resources {
    match input {
        Some(i) if cfg.enable && !degraded(cfg, usage_age) => {
            at_least(batch_capacity(cfg, i), committed)
        }
        _ => Resources::ZERO,
    }
}

/// Whether advertising `new` takes back capacity the Node shows now (either resource lower).
/// Such a patch races the scheduler: a pod it placed on the old value may be bound after the
/// applier's pod cache was read, so the floor is re-read from the API server first.
pub fn lowers(on_node: Option<Resources>, new: Resources) -> bool {
    on_node.is_some_and(|old| new.cpu_milli < old.cpu_milli || new.memory_bytes < old.memory_bytes)
}

/// `new` raised to `committed` in each resource: the floor of [`advertised`].
pub fn at_least(new: Resources, committed: Resources) -> Resources {
    Resources {
        cpu_milli: new.cpu_milli.max(committed.cpu_milli),
        memory_bytes: new.memory_bytes.max(committed.memory_bytes),
    }
}

/// The batch requests (`kubernetes.io/batch-cpu` in milli-cores, `batch-memory` in bytes) of
/// every active pod bound to the node, as the kubelet's admission sums them.
pub fn committed<'a>(batch_requests: impl IntoIterator<Item = &'a Resources>) -> Resources {
    batch_requests
        .into_iter()
        .fold(Resources::ZERO, |sum, r| Resources {
            cpu_milli: sum.cpu_milli.saturating_add(r.cpu_milli),
            memory_bytes: sum.memory_bytes.saturating_add(r.memory_bytes),
        })
}
