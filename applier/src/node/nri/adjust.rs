//! A container's planned values ([`koord_translator::pod::plan::container_plan`]) -> the OCI resources runc
//! writes when it creates the container. Pure.
//!
//! runc fails the container's creation when it cannot write a value, so only what is certain
//! to succeed goes here; everything else stays with the reconcile path:
//! - cgroup v2: the `unified` map, for the mainline files the planner range-checks
//!   ([`V2_UNIFIED`]) and only those the node has ([`NodeFiles`], probed on `kubepods`). Text
//!   and file names come from the knob map, the same as the reconcile path writes them.
//! - cgroup v1: runc rejects any `unified` entry, so only the typed OCI fields NRI carries:
//!   `cpu.shares`, `cpu.cfs_quota_us` (with the 100 ms period the contract assumes) and
//!   `memory.limit_in_bytes` (NRI also sets the swap limit to it, which runc writes to
//!   `memory.memsw.limit_in_bytes`: only where the kernel has that file). The v1 memory QoS
//!   knobs (Alibaba's `memory.min`, the watermarks) have no OCI field.

use std::collections::BTreeSet;

use koord_api::knobs;

use koord_translator::cgroup::CgroupVersion;
use koord_translator::cgroup::knob_map::{Knob, Value, map_knob};

use super::proto::{LinuxCpu, LinuxMemory, LinuxResources, OptionalInt64, OptionalUInt64};

/// The contract knobs set through cgroup v2's `unified` map at creation.
pub const V2_UNIFIED: [Knob; 8] = [
    Knob::MemoryMin,
    Knob::MemoryLow,
    Knob::MemoryHigh,
    Knob::MemoryLimitInBytes,
    Knob::OomGroup,
    Knob::CpuShares,
    Knob::CpuCfsQuotaUs,
    Knob::CpuIdle,
];

/// The v1 file NRI's memory limit drags in (see the module text).
pub const V1_MEMSW: &str = "memory.memsw.limit_in_bytes";

/// Which files this node's container cgroups have: v2 file names found in `kubepods`, and on
/// v1 whether `memory.memsw.limit_in_bytes` exists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFiles {
    pub v2: BTreeSet<&'static str>,
    pub v1_memsw: bool,
}

impl NodeFiles {
    /// The v2 files [`V2_UNIFIED`] names.
    pub fn v2_candidates() -> impl Iterator<Item = &'static str> {
        V2_UNIFIED.iter().map(|k| k.file(CgroupVersion::V2))
    }
}

/// The resources for one container, or `None` when nothing can be set at creation.
pub fn resources(
    version: CgroupVersion,
    values: &[(Knob, Value)],
    node: &NodeFiles,
) -> Option<LinuxResources> {
    let r = match version {
        CgroupVersion::V2 => v2(values, node),
        CgroupVersion::V1 => v1(values, node),
    };
    (r != LinuxResources::default()).then_some(r)
}

fn v2(values: &[(Knob, Value)], node: &NodeFiles) -> LinuxResources {
    let mut r = LinuxResources::default();
    for &(knob, value) in values {
        if !V2_UNIFIED.contains(&knob) {
            continue;
        }
        let m = map_knob(CgroupVersion::V2, knob, value);
        if node.v2.contains(m.file) {
            r.unified.insert(m.file.to_owned(), m.text);
        }
    }
    r
}

fn v1(values: &[(Knob, Value)], node: &NodeFiles) -> LinuxResources {
    let mut cpu = LinuxCpu::default();
    let mut memory = None;
    for &(knob, value) in values {
        match (knob, value) {
            (Knob::CpuShares, Value::Int(s)) => {
                cpu.shares = u64::try_from(s).ok().map(|value| OptionalUInt64 { value });
            }
            (Knob::CpuCfsQuotaUs, Value::Int(q)) => {
                cpu.quota = Some(OptionalInt64 { value: q });
                cpu.period = Some(OptionalUInt64 {
                    value: knobs::CFS_PERIOD_US.unsigned_abs(),
                });
            }
            (Knob::MemoryLimitInBytes, v) if node.v1_memsw => {
                let value = match v {
                    Value::Bytes(b) | Value::Int(b) => b,
                    Value::Unlimited => -1,
                };
                memory = Some(LinuxMemory {
                    limit: Some(OptionalInt64 { value }),
                });
            }
            _ => {}
        }
    }
    LinuxResources {
        memory,
        cpu: (cpu != LinuxCpu::default()).then_some(cpu),
        unified: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CgroupVersion::{V1, V2};

    fn all_v2() -> NodeFiles {
        NodeFiles {
            v2: NodeFiles::v2_candidates().collect(),
            v1_memsw: false,
        }
    }

    fn unified(r: Option<LinuxResources>) -> Vec<(String, String)> {
        r.map(|r| r.unified.into_iter().collect())
            .unwrap_or_default()
    }

    #[test]
    fn v2_unified_table() {
        let ls = [
            (Knob::MemoryMin, Value::Bytes(134_217_728)),
            (Knob::MemoryLow, Value::Bytes(134_217_728)),
            (Knob::MemoryHigh, Value::Unlimited),
            (Knob::WmarkRatio, Value::Int(95)),
            (Knob::WmarkScaleFactor, Value::Int(20)),
            (Knob::WmarkMinAdj, Value::Int(-25)),
            (Knob::Priority, Value::Int(0)),
            (Knob::UsePriorityOom, Value::Int(0)),
            (Knob::OomGroup, Value::Int(0)),
            (Knob::CpuBvtWarpNs, Value::Int(2)),
        ];
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            unified(resources(V2, &ls, &all_v2())),
            vec![
                s("memory.high", "max"),
                s("memory.low", "134217728"),
                s("memory.min", "134217728"),
                s("memory.oom.group", "0"),
            ],
            "the Alibaba knobs and group identity stay with the reconcile path"
        );
        let be = [
            (Knob::MemoryHigh, Value::Bytes(335_544_320)),
            (Knob::CpuShares, Value::Int(1024)),
            (Knob::CpuCfsQuotaUs, Value::Int(50_000)),
            (Knob::MemoryLimitInBytes, Value::Bytes(134_217_728)),
            (Knob::CpuIdle, Value::Int(0)),
        ];
        assert_eq!(
            unified(resources(V2, &be, &all_v2())),
            vec![
                s("cpu.idle", "0"),
                s("cpu.max", "50000 100000"),
                s("cpu.weight", "39"),
                s("memory.high", "335544320"),
                s("memory.max", "134217728"),
            ]
        );
        // A kernel without cpu.idle (before 5.15) or memory.oom.group: left out, never a
        // file runc would fail to write.
        let mut old = all_v2();
        old.v2.remove("cpu.idle");
        old.v2.remove("memory.oom.group");
        assert_eq!(
            unified(resources(
                V2,
                &[
                    (Knob::CpuIdle, Value::Int(0)),
                    (Knob::OomGroup, Value::Int(0))
                ],
                &old
            )),
            vec![]
        );
        assert_eq!(resources(V2, &[], &all_v2()), None, "nothing to set");
    }

    #[test]
    fn v1_typed_fields_table() {
        let be = [
            (Knob::MemoryHigh, Value::Bytes(1)),
            (Knob::CpuShares, Value::Int(71_680)),
            (Knob::CpuCfsQuotaUs, Value::Int(7_000_000)),
            (Knob::MemoryLimitInBytes, Value::Bytes(23_622_320_128)),
        ];
        let no_memsw = NodeFiles::default();
        let r = resources(V1, &be, &no_memsw).expect("cpu");
        assert!(r.unified.is_empty(), "runc refuses unified on v1");
        let cpu = r.cpu.expect("cpu");
        assert_eq!(cpu.shares.map(|s| s.value), Some(71_680));
        assert_eq!(cpu.quota.map(|q| q.value), Some(7_000_000));
        assert_eq!(cpu.period.map(|p| p.value), Some(100_000));
        assert_eq!(
            r.memory, None,
            "no memsw: runc would fail on the swap limit"
        );
        let memsw = NodeFiles {
            v1_memsw: true,
            ..NodeFiles::default()
        };
        let r = resources(V1, &be, &memsw).expect("some");
        assert_eq!(
            r.memory.and_then(|m| m.limit).map(|l| l.value),
            Some(23_622_320_128)
        );
        let r =
            resources(V1, &[(Knob::MemoryLimitInBytes, Value::Unlimited)], &memsw).expect("some");
        assert_eq!(r.memory.and_then(|m| m.limit).map(|l| l.value), Some(-1));
        // An LS pod on mainline v1: nothing NRI can carry.
        assert_eq!(
            resources(
                V1,
                &[
                    (Knob::MemoryMin, Value::Bytes(1)),
                    (Knob::WmarkRatio, Value::Int(95))
                ],
                &memsw
            ),
            None
        );
    }
}
