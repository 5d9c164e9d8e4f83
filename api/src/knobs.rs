//! Cgroup knob names as they appear in `koordinator.sh/resolved-qos` (cgroup v1 / Alibaba Cloud
//! Linux file names) and their cgroup v2 counterparts.

pub const MEMORY_MIN: &str = "memory.min";
pub const MEMORY_LOW: &str = "memory.low";
pub const MEMORY_HIGH: &str = "memory.high";
pub const MEMORY_WMARK_RATIO: &str = "memory.wmark_ratio";
/// Read-only on the kernel: computed for display, never written.
pub const MEMORY_WMARK_HIGH: &str = "memory.wmark_high";
pub const MEMORY_WMARK_SCALE_FACTOR: &str = "memory.wmark_scale_factor";
pub const MEMORY_WMARK_MIN_ADJ: &str = "memory.wmark_min_adj";
pub const MEMORY_PRIORITY: &str = "memory.priority";
pub const MEMORY_USE_PRIORITY_OOM: &str = "memory.use_priority_oom";
pub const MEMORY_OOM_GROUP: &str = "memory.oom.group";

pub const CPU_SHARES: &str = "cpu.shares";
pub const CPU_CFS_QUOTA_US: &str = "cpu.cfs_quota_us";
pub const MEMORY_LIMIT_IN_BYTES: &str = "memory.limit_in_bytes";

/// cgroup v2 names of the batch knobs.
pub const V2_CPU_WEIGHT: &str = "cpu.weight";
pub const V2_CPU_MAX: &str = "cpu.max";
pub const V2_MEMORY_MAX: &str = "memory.max";

/// Page size used for every page-rounded value in the contract.
pub const PAGE_SIZE: i64 = 4096;
/// CFS period the batch quota is expressed against (microseconds).
pub const CFS_PERIOD_US: i64 = 100_000;
/// Smallest CFS quota the kernel accepts (microseconds).
pub const CFS_QUOTA_MIN_US: i64 = 1_000;
pub const CPU_SHARES_MIN: i64 = 2;
pub const CPU_SHARES_MAX: i64 = 262_144;

/// `cpu.shares` from milli-cores, as the kubelet and Koordinator compute it.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return CPU_SHARES_MIN;
    }
    (milli.saturating_mul(1024) / 1000).clamp(CPU_SHARES_MIN, CPU_SHARES_MAX)
}

/// `cpu.cfs_quota_us` from a milli-core limit: `-1` without one, at least 1000 otherwise.
pub fn milli_cpu_to_quota(milli: Option<i64>) -> i64 {
    match milli {
        Some(m) if m > 0 => (m.saturating_mul(CFS_PERIOD_US) / 1000).max(CFS_QUOTA_MIN_US),
        _ => -1,
    }
}

/// cgroup v2 `cpu.weight` from v1 `cpu.shares` (the kubelet formula), clamped to [1, 10000].
pub fn shares_to_weight(shares: i64) -> i64 {
    let shares = shares.clamp(CPU_SHARES_MIN, CPU_SHARES_MAX);
    (1 + (shares - 2) * 9999 / 262_142).clamp(1, 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_quota_weight_table() {
        for (milli, shares) in [
            (0, 2),
            (-1, 2),
            (1, 2),
            (500, 512),
            (2000, 2048),
            (70_000, 71_680),
            (1_000_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "milli {milli}");
        }
        for (milli, quota) in [
            (None, -1),
            (Some(0), -1),
            (Some(5), 1000),
            (Some(500), 50_000),
            (Some(70_000), 7_000_000),
        ] {
            assert_eq!(milli_cpu_to_quota(milli), quota, "milli {milli:?}");
        }
        for (shares, weight) in [
            (2, 1),
            (1024, 39),
            (262_144, 10_000),
            (71_680, 2735),
            (0, 1),
        ] {
            assert_eq!(shares_to_weight(shares), weight, "shares {shares}");
        }
    }
}
