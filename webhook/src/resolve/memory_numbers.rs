//! Byte arithmetic of memory QoS (docs/contract.md §2, Numbers; §3 for the rounding).

use koord_api::knobs::PAGE_SIZE;
use koord_api::{ContainerMemoryKnobs, MaxOr, MemoryQosParams};

/// A container's memory request and limit in bytes (batch-memory for BE pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBasis {
    pub request: i64,
    pub limit: Option<i64>,
}

fn percent(value: i64, pct: i64) -> i64 {
    // Both divisions truncate toward zero. i64 when the product fits (every real request:
    // a 128-bit division is a library call); else i128, where request * 100 cannot overflow.
    match value.checked_mul(pct) {
        Some(product) => product / 100,
        None => i64::try_from(i128::from(value) * i128::from(pct) / 100).unwrap_or(i64::MAX),
    }
}

fn floor_pages(bytes: i64) -> i64 {
    bytes / PAGE_SIZE * PAGE_SIZE
}

/// The ten container knobs for one container.
pub fn container_knobs(basis: MemoryBasis, p: &MemoryQosParams) -> ContainerMemoryKnobs {
    let request = basis.request.max(0);
    let limit = basis.limit.filter(|l| *l > 0);
    let min = percent(request, p.min_limit_percent);
    // The reference's fix-up: a low that is set but below min rises to it; a low of 0 (the
    // class does not ask for low protection) stays 0, as koordlet writes it.
    let mut low = percent(request, p.low_limit_percent);
    if low > 0 && low < min {
        low = min;
    }
    let throttling = p.throttling_percent > 0;
    let high = match limit {
        Some(l) if throttling => {
            MaxOr::Bytes(floor_pages(percent(l, p.throttling_percent)).max(min))
        }
        _ => MaxOr::Max,
    };
    let wmark_base = if throttling { high.bytes() } else { limit };
    let wmark_high = match wmark_base {
        Some(base) => MaxOr::Bytes(percent(base / PAGE_SIZE, p.wmark_ratio) * PAGE_SIZE),
        None => MaxOr::Max,
    };
    ContainerMemoryKnobs {
        min,
        low,
        high,
        wmark_ratio: p.wmark_ratio,
        wmark_high,
        wmark_scale_factor: p.wmark_scale_permill,
        wmark_min_adj: p.wmark_min_adj,
        priority: p.priority,
        use_priority_oom: p.priority_enable,
        oom_group: p.oom_kill_group,
    }
}

/// The pod cgroup's `memory.high` from a pod-level memory limit: `limit * throttlingPercent /
/// 100` floored to pages, never below the pod's `memory.min`; `None` without throttling or
/// without a limit (the field is then left out of the annotation).
pub fn pod_high(limit: Option<i64>, p: &MemoryQosParams, pod_min: i64) -> Option<i64> {
    let limit = limit.filter(|l| *l > 0)?;
    (p.throttling_percent > 0)
        .then(|| floor_pages(percent(limit, p.throttling_percent)).max(pod_min))
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn percent_truncates_and_never_overflows() {
        for (value, pct, want) in [
            (1000, 7, 70),
            (999, 50, 499),
            (-1000, 7, -70),
            (0, 100, 0),
            (i64::MAX, 100, i64::MAX),
            (i64::MAX, 50, i64::MAX / 2),
            (
                i64::MAX / 3,
                99,
                (i128::from(i64::MAX / 3) * 99 / 100) as i64,
            ),
        ] {
            assert_eq!(percent(value, pct), want, "{value} * {pct}%");
        }
    }
}
