//! The arithmetic of hierarchical memory protection. Pure.
//!
//! The kernel caps a cgroup's effective `memory.min`/`memory.low` by its ancestors' ("Effective
//! min boundary is limited by memory.min values of all ancestor cgroups"), so a pod's
//! protection only holds when every directory between the cgroup root and the pod protects at
//! least as much. An ancestor therefore gets the sum of what its direct children hold: values
//! the pods' annotations already decided, added up, never invented.

use serde::Serialize;

use koord_translator::cgroup::CgroupVersion;
use koord_translator::cgroup::layout::KubeQos;
use koord_translator::cgroup::readback::{Expect, V1_UNLIMITED_READBACK};

use crate::node::shared::limit::{NotALimit, parse_limit};

/// A protection value as a `memory.min`/`memory.low` file shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protection {
    Bytes(u64),
    /// `max` (v2), or v1's page-aligned unlimited.
    Max,
}

impl Protection {
    pub const ZERO: Protection = Protection::Bytes(0);

    /// Parses a file's content: a byte count, `max`, or v1's unlimited.
    pub fn parse(text: &str) -> Result<Self, NotALimit> {
        Ok(parse_limit(text)?.map_or(Protection::Max, Protection::from_bytes))
    }

    fn from_bytes(v: u64) -> Self {
        if v >= V1_UNLIMITED_READBACK.unsigned_abs() {
            Protection::Max
        } else {
            Protection::Bytes(v)
        }
    }

    /// The sum of two values; anything at or above the unlimited threshold is `Max`.
    pub fn saturating_add(self, other: Self) -> Self {
        match (self, other) {
            (Protection::Bytes(a), Protection::Bytes(b)) => {
                Protection::from_bytes(a.saturating_add(b))
            }
            _ => Protection::Max,
        }
    }

    /// The text written on `version`: v2 takes `max`; on v1 (Alibaba Cloud Linux) unlimited
    /// is i64::MAX, as for `memory.high` there.
    pub fn text(self, version: CgroupVersion) -> String {
        match (self, version) {
            (Protection::Bytes(v), _) => v.to_string(),
            (Protection::Max, CgroupVersion::V2) => "max".to_owned(),
            (Protection::Max, CgroupVersion::V1) => i64::MAX.to_string(),
        }
    }

    /// How the written value reads back (memcg stores pages; unlimited reads as `max` or v1's
    /// page-aligned maximum).
    pub fn expect(self) -> Expect {
        match self {
            Protection::Bytes(v) => Expect::Bytes(i64::try_from(v).unwrap_or(i64::MAX)),
            Protection::Max => Expect::Unlimited,
        }
    }

    /// For the metrics gauge: bytes, unlimited as i64::MAX.
    pub fn as_i64(self) -> i64 {
        match self {
            Protection::Bytes(v) => i64::try_from(v).unwrap_or(i64::MAX),
            Protection::Max => i64::MAX,
        }
    }
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Protection::Bytes(v) => write!(f, "{v}"),
            Protection::Max => f.write_str("max"),
        }
    }
}

/// The two protection files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ProtectionFile {
    Min,
    Low,
}

impl ProtectionFile {
    pub const BOTH: [ProtectionFile; 2] = [ProtectionFile::Min, ProtectionFile::Low];

    /// The same name on cgroup v2 and on Alibaba Cloud Linux v1.
    pub fn name(self) -> &'static str {
        match self {
            ProtectionFile::Min => koord_api::knobs::MEMORY_MIN,
            ProtectionFile::Low => koord_api::knobs::MEMORY_LOW,
        }
    }
}

/// An ancestor of pods: `kubepods`, or the directory of a QoS class below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// `kubepods/burstable` or `kubepods/besteffort` (`Guaranteed` has none: its pods sit
    /// directly under `kubepods`).
    Qos(KubeQos),
    Kubepods,
}

impl Level {
    /// Bottom-up: the QoS-class directories before `kubepods`, whose sum includes them.
    pub const BOTTOM_UP: [Level; 3] = [
        Level::Qos(KubeQos::Burstable),
        Level::Qos(KubeQos::BestEffort),
        Level::Kubepods,
    ];

    /// Whether a pod of class `qos` sits below this ancestor.
    pub fn is_above(self, qos: KubeQos) -> bool {
        match self {
            Level::Kubepods => true,
            Level::Qos(q) => q == qos,
        }
    }
}

/// Which QoS-level protection files the kubelet keeps rewriting itself (KEP-2570, the
/// kubelet's `MemoryQoS`), read from the kubelet's source (`pkg/kubelet/cm/
/// qos_container_manager_linux.go`, `setMemoryQoS`, called on every QoS cgroup update, i.e.
/// every pod sync). The kubelet's value wins in these files and the applier never writes them
/// (docs/contract.md §6, Ownership): a second writer of a file the kubelet rewrites within
/// seconds is a write loop, not a protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KubeletMemoryQos {
    /// The gate off, or on with `memoryReservationPolicy: None` (the 1.37 default): the kubelet
    /// writes these files only when it starts (a reset to 0, which the next pass undoes); the
    /// applier owns all six.
    #[default]
    #[value(alias = "false", alias = "none")]
    Off,
    /// The alpha of 1.22-1.35 with the gate on: `memory.min` of `kubepods` (Guaranteed +
    /// Burstable requests) and of `kubepods/burstable` (Burstable requests).
    Alpha,
    /// 1.36+ with `memoryReservationPolicy: TieredReservation` (beta, gate on by default in
    /// 1.37): `kubepods` `memory.min` (Guaranteed + Burstable requests) and `memory.low`
    /// (Burstable requests), `kubepods/burstable` `memory.low` (Burstable requests). Not
    /// `kubepods/burstable` `memory.min`: the applier writes it.
    #[value(alias = "true")]
    Tiered,
}

impl KubeletMemoryQos {
    /// Whether the kubelet in this mode rewrites `file` of `level`. `besteffort` is never the
    /// kubelet's.
    pub fn owns(self, level: Level, file: ProtectionFile) -> bool {
        use ProtectionFile::{Low, Min};
        let burstable = Level::Qos(KubeQos::Burstable);
        match self {
            KubeletMemoryQos::Off => false,
            KubeletMemoryQos::Alpha => {
                file == Min && (level == Level::Kubepods || level == burstable)
            }
            KubeletMemoryQos::Tiered => match level {
                Level::Kubepods => true,
                l => l == burstable && file == Low,
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KubeletMemoryQos::Off => "off",
            KubeletMemoryQos::Alpha => "alpha",
            KubeletMemoryQos::Tiered => "tiered",
        }
    }
}

/// What one ancestor file should hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The sum of the direct children's values.
    pub sum: Protection,
    /// The value to leave in the file: the sum, or, in a file the kubelet owns, whatever the
    /// kubelet wrote.
    pub target: Protection,
    /// The kubelet owns the file: never written.
    pub kubelet_owned: bool,
}

impl Decision {
    /// The kubelet's value protects less than the children hold: the kernel caps them to it.
    /// Reported, never fought.
    pub fn capped_by_kubelet(&self) -> bool {
        self.kubelet_owned && self.target < self.sum
    }
}

/// The value for an ancestor file holding `current`, whose direct children hold `children`.
/// `kubelet_owned`: the kubelet rewrites the file (see [`KubeletMemoryQos::owns`]); it keeps
/// `current`, whatever it is. Otherwise the file gets exactly the sum, down as well as up: a
/// parent protecting more than its children claim would only shelter memory no pod asked for.
pub fn decide(current: Protection, children: &[Protection], kubelet_owned: bool) -> Decision {
    let sum = children
        .iter()
        .fold(Protection::ZERO, |acc, v| acc.saturating_add(*v));
    let target = if kubelet_owned { current } else { sum };
    Decision {
        sum,
        target,
        kubelet_owned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn b(v: u64) -> Protection {
        Protection::Bytes(v)
    }

    #[test]
    fn parse_and_text_table() {
        let cases: &[(&str, Result<Protection, ()>)] = &[
            ("0\n", Ok(b(0))),
            ("134217728", Ok(b(128 * MIB))),
            ("max\n", Ok(Protection::Max)),
            ("9223372036854771712", Ok(Protection::Max)),
            ("9223372036854775807", Ok(Protection::Max)),
            ("9223372036854767616", Ok(b(9_223_372_036_854_767_616))),
            ("-1", Err(())),
            ("", Err(())),
            ("12 34", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(Protection::parse(text).map_err(|_| ()), *want, "{text:?}");
        }
        assert_eq!(b(4096).text(CgroupVersion::V2), "4096");
        assert_eq!(Protection::Max.text(CgroupVersion::V2), "max");
        assert_eq!(
            Protection::Max.text(CgroupVersion::V1),
            "9223372036854775807"
        );
        assert_eq!(b(4096).expect(), Expect::Bytes(4096));
        assert_eq!(Protection::Max.expect(), Expect::Unlimited);
    }

    #[test]
    fn decide_table() {
        // (current, children, never_lower) -> (sum, target)
        type Case = (Protection, Vec<Protection>, bool, Protection, Protection);
        let cases: Vec<Case> = vec![
            // No children (no pods of the class): 0.
            (b(0), vec![], false, b(0), b(0)),
            // Two LS pods: the sum, up from 0.
            (
                b(0),
                vec![b(128 * MIB), b(70 * MIB)],
                false,
                b(198 * MIB),
                b(198 * MIB),
            ),
            // A pod went away: down to the new sum.
            (
                b(198 * MIB),
                vec![b(70 * MIB)],
                false,
                b(70 * MIB),
                b(70 * MIB),
            ),
            // BE pods hold 0: their parent stays 0, BE gains nothing.
            (b(0), vec![b(0), b(0), b(0)], false, b(0), b(0)),
            // Someone raised BE's parent behind our back: back to the sum of its children.
            (b(64 * MIB), vec![b(0)], false, b(0), b(0)),
            // One child unlimited: the parent must be unlimited too.
            (
                b(0),
                vec![b(MIB), Protection::Max],
                false,
                Protection::Max,
                Protection::Max,
            ),
            // Overflowing sums saturate at unlimited.
            (
                b(0),
                vec![b(u64::MAX / 2), b(u64::MAX / 2)],
                false,
                Protection::Max,
                Protection::Max,
            ),
            // The kubelet's file keeps the kubelet's value, above the sum...
            (
                b(512 * MIB),
                vec![b(128 * MIB)],
                true,
                b(128 * MIB),
                b(512 * MIB),
            ),
            // ...and below it too: raising it would be undone by the kubelet's next update,
            // and raised again by the next pass (a write loop).
            (
                b(64 * MIB),
                vec![b(128 * MIB)],
                true,
                b(128 * MIB),
                b(64 * MIB),
            ),
            (b(0), vec![b(128 * MIB)], true, b(128 * MIB), b(0)),
        ];
        for (current, children, never_lower, sum, target) in cases {
            let d = decide(current, &children, never_lower);
            assert_eq!(
                (d.sum, d.target),
                (sum, target),
                "current {current}, children {children:?}, kubelet owned {never_lower}"
            );
            assert_eq!(d.capped_by_kubelet(), never_lower && target < sum);
        }
    }

    #[test]
    fn the_files_each_kubelet_mode_owns() {
        use KubeQos::Burstable;
        use ProtectionFile::{Low, Min};
        let owned = |mode: KubeletMemoryQos| -> Vec<(Level, ProtectionFile)> {
            Level::BOTTOM_UP
                .iter()
                .flat_map(|l| ProtectionFile::BOTH.map(|f| (*l, f)))
                .filter(|(l, f)| mode.owns(*l, *f))
                .collect()
        };
        assert_eq!(owned(KubeletMemoryQos::Off), vec![]);
        assert_eq!(
            owned(KubeletMemoryQos::Alpha),
            vec![(Level::Qos(Burstable), Min), (Level::Kubepods, Min)]
        );
        // v1.37.2 setMemoryQoS: root min = G+B, root low = B, burstable low = B.
        assert_eq!(
            owned(KubeletMemoryQos::Tiered),
            vec![
                (Level::Qos(Burstable), Low),
                (Level::Kubepods, Min),
                (Level::Kubepods, Low)
            ]
        );
    }

    #[test]
    fn levels_above_a_pod() {
        use KubeQos::{BestEffort, Burstable, Guaranteed};
        let above = |qos| {
            Level::BOTTOM_UP
                .into_iter()
                .filter(|l| l.is_above(qos))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            above(Burstable),
            vec![Level::Qos(Burstable), Level::Kubepods]
        );
        assert_eq!(
            above(BestEffort),
            vec![Level::Qos(BestEffort), Level::Kubepods]
        );
        assert_eq!(above(Guaranteed), vec![Level::Kubepods]);
    }
}
