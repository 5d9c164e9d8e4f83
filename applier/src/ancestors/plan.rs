//! The arithmetic of hierarchical memory protection. Pure.
//!
//! The kernel caps a cgroup's effective `memory.min`/`memory.low` by its ancestors' ("Effective
//! min boundary is limited by memory.min values of all ancestor cgroups"), so a pod's
//! protection only holds when every directory between the cgroup root and the pod protects at
//! least as much. An ancestor therefore gets the sum of what its direct children hold: values
//! the pods' annotations already decided, added up, never invented.

use serde::Serialize;

use crate::cgroup::CgroupVersion;
use crate::cgroup::layout::KubeQos;
use crate::cgroup::readback::{Expect, V1_UNLIMITED_READBACK};

/// A protection value as a `memory.min`/`memory.low` file shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protection {
    Bytes(u64),
    /// `max` (v2), or v1's page-aligned unlimited.
    Max,
}

/// What a child's or an ancestor's file held that is not a protection value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a byte count or max")]
pub struct ParseProtectionError(pub String);

impl Protection {
    pub const ZERO: Protection = Protection::Bytes(0);

    /// Parses a file's content: a byte count, `max`, or v1's unlimited.
    pub fn parse(text: &str) -> Result<Self, ParseProtectionError> {
        let t = text.trim();
        if t == "max" {
            return Ok(Protection::Max);
        }
        match t.parse::<u64>() {
            Ok(v) => Ok(Protection::from_bytes(v)),
            Err(_) => Err(ParseProtectionError(t.to_owned())),
        }
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

/// The files the kubelet itself may write when its `MemoryQoS` feature gate is on: KEP-2570's
/// first version sets `memory.min` of `kubepods` (Guaranteed + Burstable requests) and of
/// `kubepods/burstable` (Burstable requests); later kubelets with a `memoryReservationPolicy`
/// set `memory.min` of `kubepods` and `memory.low` of `kubepods/burstable` (and reset them to 0
/// under the policy `None`). The applier cannot tell the versions apart, so with the gate on
/// it treats all four as the kubelet's. `besteffort` is never the kubelet's.
pub fn kubelet_writes(level: Level, _file: ProtectionFile) -> bool {
    matches!(level, Level::Kubepods | Level::Qos(KubeQos::Burstable))
}

/// What one ancestor file should hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The sum of the direct children's values.
    pub sum: Protection,
    /// The value to leave in the file: the sum, or the current value when the kubelet owns
    /// the file and already protects more (never lowered).
    pub target: Protection,
}

impl Decision {
    /// The file keeps a larger value someone else (the kubelet) wrote.
    pub fn kept_above_sum(&self) -> bool {
        self.target > self.sum
    }
}

/// The value for an ancestor file holding `current`, whose direct children hold `children`.
/// `never_lower`: the kubelet owns the file (its `MemoryQoS` gate is on); its value, the sum of
/// the pods' requests, is kept when it is at least the sum, and raised to the sum otherwise.
/// Otherwise the file gets exactly the sum, down as well as up: a parent protecting more than
/// its children claim would only shelter memory no pod asked for.
pub fn decide(current: Protection, children: &[Protection], never_lower: bool) -> Decision {
    let sum = children
        .iter()
        .fold(Protection::ZERO, |acc, v| acc.saturating_add(*v));
    let target = if never_lower { sum.max(current) } else { sum };
    Decision { sum, target }
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
            // The kubelet's larger value (sum of requests) is kept...
            (
                b(512 * MIB),
                vec![b(128 * MIB)],
                true,
                b(128 * MIB),
                b(512 * MIB),
            ),
            // ...and raised when the children claim more.
            (
                b(64 * MIB),
                vec![b(128 * MIB)],
                true,
                b(128 * MIB),
                b(128 * MIB),
            ),
            (b(0), vec![b(128 * MIB)], true, b(128 * MIB), b(128 * MIB)),
        ];
        for (current, children, never_lower, sum, target) in cases {
            let d = decide(current, &children, never_lower);
            assert_eq!(
                (d.sum, d.target),
                (sum, target),
                "current {current}, children {children:?}, never_lower {never_lower}"
            );
            assert_eq!(d.kept_above_sum(), target > sum);
        }
    }

    #[test]
    fn the_kubelet_writes_burstable_and_kubepods_never_besteffort() {
        let owned: Vec<(Level, ProtectionFile)> = Level::BOTTOM_UP
            .iter()
            .flat_map(|l| ProtectionFile::BOTH.map(|f| (*l, f)))
            .filter(|(l, f)| kubelet_writes(*l, *f))
            .collect();
        assert_eq!(
            owned,
            vec![
                (Level::Qos(KubeQos::Burstable), ProtectionFile::Min),
                (Level::Qos(KubeQos::Burstable), ProtectionFile::Low),
                (Level::Kubepods, ProtectionFile::Min),
                (Level::Kubepods, ProtectionFile::Low),
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
