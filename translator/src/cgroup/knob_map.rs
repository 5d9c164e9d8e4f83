//! The knob map: contract knobs (cgroup v1 / Alibaba Cloud Linux names, as in
//! `koordinator.sh/resolved-qos`) -> the file and text this node's hierarchy expects, plus how to
//! recognise the value when reading it back. Pure. (The webhook's "translation" is something
//! else: batch resources of BE pods; this module only maps names and values between cgroup
//! versions.)
//!
//! Decisions (see docs/decisions.md):
//! - Unlimited `memory.high` is written as `max` on v2 (the kernel's own token, read back as
//!   `max`) and as `9223372036854775807` (i64::MAX) on v1: the Alibaba v1 memcg is not documented
//!   to accept `max`, and i64::MAX is what Koordinator writes there. The v1 kernel reads it back
//!   page-aligned (9223372036854771712), which [`Expect::Unlimited`] accepts.
//! - `memory.limit_in_bytes` `-1` is written as `-1` on v1 (documented reset) and `max` on v2.
//! - `cpu.cfs_quota_us` becomes `cpu.max` = `"<quota|max> 100000"`; `cpu.shares` becomes
//!   `cpu.weight` by the kubelet formula in `koord_api::knobs::shares_to_weight`.

use koord_api::knobs;
use serde::Serialize;

use crate::cgroup::readback::Expect;
use crate::cgroup::{CgroupVersion, Controller};

/// A knob of the contract, named as in `koordinator.sh/resolved-qos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Knob {
    MemoryMin,
    MemoryLow,
    MemoryHigh,
    WmarkRatio,
    WmarkScaleFactor,
    WmarkMinAdj,
    Priority,
    UsePriorityOom,
    OomGroup,
    CpuShares,
    CpuCfsQuotaUs,
    MemoryLimitInBytes,
    /// Alibaba group identity (`cpu.bvt_warp_ns`, -1..=2); the same name on v1 and v2.
    CpuBvtWarpNs,
    /// Mainline SCHED_IDLE cgroups (`cpu.idle`, 0/1, Linux 5.15+); the same name on v1 and v2.
    CpuIdle,
}

/// `cpu.bvt_warp_ns`: Alibaba Cloud Linux group identity (see `docs/contract.md`, "## 3. Fine print").
pub const CPU_BVT_WARP_NS: &str = "cpu.bvt_warp_ns";
/// `cpu.idle`: mainline SCHED_IDLE cgroups, Linux 5.15+.
pub const CPU_IDLE: &str = "cpu.idle";

impl Knob {
    /// The contract (cgroup v1) name.
    pub fn name(self) -> &'static str {
        match self {
            Knob::MemoryMin => knobs::MEMORY_MIN,
            Knob::MemoryLow => knobs::MEMORY_LOW,
            Knob::MemoryHigh => knobs::MEMORY_HIGH,
            Knob::WmarkRatio => knobs::MEMORY_WMARK_RATIO,
            Knob::WmarkScaleFactor => knobs::MEMORY_WMARK_SCALE_FACTOR,
            Knob::WmarkMinAdj => knobs::MEMORY_WMARK_MIN_ADJ,
            Knob::Priority => knobs::MEMORY_PRIORITY,
            Knob::UsePriorityOom => knobs::MEMORY_USE_PRIORITY_OOM,
            Knob::OomGroup => knobs::MEMORY_OOM_GROUP,
            Knob::CpuShares => knobs::CPU_SHARES,
            Knob::CpuCfsQuotaUs => knobs::CPU_CFS_QUOTA_US,
            Knob::MemoryLimitInBytes => knobs::MEMORY_LIMIT_IN_BYTES,
            Knob::CpuBvtWarpNs => CPU_BVT_WARP_NS,
            Knob::CpuIdle => CPU_IDLE,
        }
    }

    pub fn controller(self) -> Controller {
        match self {
            Knob::CpuShares | Knob::CpuCfsQuotaUs | Knob::CpuBvtWarpNs | Knob::CpuIdle => {
                Controller::Cpu
            }
            _ => Controller::Memory,
        }
    }

    /// The file name on `version`.
    pub fn file(self, version: CgroupVersion) -> &'static str {
        match (version, self) {
            (CgroupVersion::V2, Knob::CpuShares) => knobs::V2_CPU_WEIGHT,
            (CgroupVersion::V2, Knob::CpuCfsQuotaUs) => knobs::V2_CPU_MAX,
            (CgroupVersion::V2, Knob::MemoryLimitInBytes) => knobs::V2_MEMORY_MAX,
            (_, k) => k.name(),
        }
    }
}

/// A contract value: a plain integer, or a byte count that may be unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Value {
    Int(i64),
    Bytes(i64),
    Unlimited,
}

/// What to write and how to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedKnob {
    pub file: &'static str,
    pub text: String,
    pub expect: Expect,
}

/// Maps one knob value to `version`'s file and text. Values were range-checked by the planner.
pub fn map_knob(version: CgroupVersion, knob: Knob, value: Value) -> MappedKnob {
    let file = knob.file(version);
    let (text, expect) = match (version, knob, value) {
        (CgroupVersion::V2, Knob::CpuShares, Value::Int(shares)) => {
            let w = knobs::shares_to_weight(shares);
            (w.to_string(), Expect::Int(w))
        }
        (CgroupVersion::V2, Knob::CpuCfsQuotaUs, Value::Int(q)) => {
            let quota = (q > 0).then_some(q);
            let text = match quota {
                Some(q) => format!("{q} {}", knobs::CFS_PERIOD_US),
                None => format!("max {}", knobs::CFS_PERIOD_US),
            };
            (
                text,
                Expect::CpuMax {
                    quota,
                    period: knobs::CFS_PERIOD_US,
                },
            )
        }
        (CgroupVersion::V2, _, Value::Unlimited) => ("max".to_owned(), Expect::Unlimited),
        (CgroupVersion::V1, Knob::MemoryLimitInBytes, Value::Unlimited) => {
            ("-1".to_owned(), Expect::Unlimited)
        }
        (CgroupVersion::V1, _, Value::Unlimited) => (i64::MAX.to_string(), Expect::Unlimited),
        (_, _, Value::Bytes(b)) => (b.to_string(), Expect::Bytes(b)),
        (_, _, Value::Int(i)) => (i.to_string(), Expect::Int(i)),
    };
    MappedKnob { file, text, expect }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::readback::matches;
    use CgroupVersion::{V1, V2};

    #[test]
    fn knob_map_table() {
        let cases = [
            (
                V1,
                Knob::MemoryHigh,
                Value::Unlimited,
                "memory.high",
                "9223372036854775807",
            ),
            (V2, Knob::MemoryHigh, Value::Unlimited, "memory.high", "max"),
            (
                V1,
                Knob::MemoryHigh,
                Value::Bytes(83_886_080),
                "memory.high",
                "83886080",
            ),
            (
                V1,
                Knob::MemoryLimitInBytes,
                Value::Unlimited,
                "memory.limit_in_bytes",
                "-1",
            ),
            (
                V2,
                Knob::MemoryLimitInBytes,
                Value::Unlimited,
                "memory.max",
                "max",
            ),
            (
                V2,
                Knob::MemoryLimitInBytes,
                Value::Bytes(23_622_320_128),
                "memory.max",
                "23622320128",
            ),
            (
                V1,
                Knob::CpuShares,
                Value::Int(71_680),
                "cpu.shares",
                "71680",
            ),
            (
                V2,
                Knob::CpuShares,
                Value::Int(71_680),
                "cpu.weight",
                "2735",
            ),
            (V2, Knob::CpuShares, Value::Int(1024), "cpu.weight", "39"),
            (
                V1,
                Knob::CpuCfsQuotaUs,
                Value::Int(-1),
                "cpu.cfs_quota_us",
                "-1",
            ),
            (
                V1,
                Knob::CpuCfsQuotaUs,
                Value::Int(7_000_000),
                "cpu.cfs_quota_us",
                "7000000",
            ),
            (
                V2,
                Knob::CpuCfsQuotaUs,
                Value::Int(7_000_000),
                "cpu.max",
                "7000000 100000",
            ),
            (
                V2,
                Knob::CpuCfsQuotaUs,
                Value::Int(-1),
                "cpu.max",
                "max 100000",
            ),
            (
                V2,
                Knob::WmarkMinAdj,
                Value::Int(-25),
                "memory.wmark_min_adj",
                "-25",
            ),
            (V1, Knob::OomGroup, Value::Int(1), "memory.oom.group", "1"),
            (
                V1,
                Knob::CpuBvtWarpNs,
                Value::Int(-1),
                "cpu.bvt_warp_ns",
                "-1",
            ),
            (
                V2,
                Knob::CpuBvtWarpNs,
                Value::Int(2),
                "cpu.bvt_warp_ns",
                "2",
            ),
            (V1, Knob::CpuIdle, Value::Int(1), "cpu.idle", "1"),
            (V2, Knob::CpuIdle, Value::Int(0), "cpu.idle", "0"),
        ];
        for (v, knob, value, file, text) in cases {
            let t = map_knob(v, knob, value);
            assert_eq!(
                (t.file, t.text.as_str()),
                (file, text),
                "{v} {knob:?} {value:?}"
            );
            assert!(
                matches(t.expect, text),
                "{v} {knob:?}: what we write must read back as equal"
            );
        }
    }
}
