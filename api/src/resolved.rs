//! `koordinator.sh/resolved-qos` version 1 (`docs/contract.md`, "## 1. The annotation").
//!
//! Field order in these structs is the serialized key order, so the JSON is stable. Byte values
//! are integers; an unlimited memory knob is the string `"max"`; in `batch`, unlimited is `-1`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The contract version this crate writes.
pub const RESOLVED_QOS_VERSION: u32 = 1;

/// Koordinator QoS classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QosClass {
    #[serde(rename = "LSE")]
    Lse,
    #[serde(rename = "LSR")]
    Lsr,
    #[serde(rename = "LS")]
    Ls,
    #[serde(rename = "BE")]
    Be,
    #[serde(rename = "SYSTEM")]
    System,
}

impl QosClass {
    pub const ALL: [QosClass; 5] = [
        QosClass::Lse,
        QosClass::Lsr,
        QosClass::Ls,
        QosClass::Be,
        QosClass::System,
    ];

    /// Parses a class name; case-sensitive, as Koordinator does.
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "LSE" => Self::Lse,
            "LSR" => Self::Lsr,
            "LS" => Self::Ls,
            "BE" => Self::Be,
            "SYSTEM" => Self::System,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lse => "LSE",
            Self::Lsr => "LSR",
            Self::Ls => "LS",
            Self::Be => "BE",
            Self::System => "SYSTEM",
        }
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the QoS class came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QosClassSource {
    Label,
    LegacyLabel,
    KubernetesQos,
}

/// The memory QoS policy as printed (canonical form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryQosPolicy {
    Auto,
    Default,
    None,
}

/// Which input decided a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecisionSource {
    PodAnnotation,
    LegacyAnnotation,
    NamespaceConfig,
    ClusterConfig,
    Default,
}

/// The nine memory QoS parameters (all resolved, never absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryQosParams {
    pub min_limit_percent: i64,
    pub low_limit_percent: i64,
    pub throttling_percent: i64,
    pub wmark_ratio: i64,
    pub wmark_min_adj: i64,
    pub wmark_scale_permill: i64,
    pub priority: i64,
    pub priority_enable: i64,
    pub oom_kill_group: i64,
}

/// A parameter's name and inclusive range, for validation and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub min: i64,
    pub max: i64,
}

impl ParamSpec {
    /// Whether `v` is inside the inclusive range.
    pub fn contains(&self, v: i64) -> bool {
        (self.min..=self.max).contains(&v)
    }
}

/// The first of `values` outside its spec's range (specs and values in the same order).
pub fn first_out_of_range<const N: usize>(
    specs: &[ParamSpec; N],
    values: [i64; N],
) -> Option<(ParamSpec, i64)> {
    specs
        .iter()
        .zip(values)
        .find(|(spec, v)| !spec.contains(*v))
        .map(|(spec, v)| (*spec, v))
}

impl MemoryQosParams {
    pub const MIN_LIMIT_PERCENT: ParamSpec = ParamSpec {
        name: "minLimitPercent",
        min: 0,
        max: 100,
    };
    pub const LOW_LIMIT_PERCENT: ParamSpec = ParamSpec {
        name: "lowLimitPercent",
        min: 0,
        max: 100,
    };
    pub const THROTTLING_PERCENT: ParamSpec = ParamSpec {
        name: "throttlingPercent",
        min: 0,
        max: 100,
    };
    /// Also the range of the container knob `memory.wmark_ratio`.
    pub const WMARK_RATIO: ParamSpec = ParamSpec {
        name: "wmarkRatio",
        min: 0,
        max: 100,
    };
    /// Also the range of the container knob `memory.wmark_min_adj`.
    pub const WMARK_MIN_ADJ: ParamSpec = ParamSpec {
        name: "wmarkMinAdj",
        min: -25,
        max: 50,
    };
    /// Also the range of the container knob `memory.wmark_scale_factor`.
    pub const WMARK_SCALE_PERMILL: ParamSpec = ParamSpec {
        name: "wmarkScalePermill",
        min: 1,
        max: 1000,
    };
    /// Also the range of the container knob `memory.priority`.
    pub const PRIORITY: ParamSpec = ParamSpec {
        name: "priority",
        min: 0,
        max: 12,
    };
    /// Also the range of the container knob `memory.use_priority_oom`.
    pub const PRIORITY_ENABLE: ParamSpec = ParamSpec {
        name: "priorityEnable",
        min: 0,
        max: 1,
    };
    /// Also the range of the container knob `memory.oom.group`.
    pub const OOM_KILL_GROUP: ParamSpec = ParamSpec {
        name: "oomKillGroup",
        min: 0,
        max: 1,
    };

    /// Names and hard ranges of every parameter, in serialized order: the one table both the
    /// webhook (validating input) and the applier (validating the annotation) ask.
    pub const SPECS: [ParamSpec; 9] = [
        Self::MIN_LIMIT_PERCENT,
        Self::LOW_LIMIT_PERCENT,
        Self::THROTTLING_PERCENT,
        Self::WMARK_RATIO,
        Self::WMARK_MIN_ADJ,
        Self::WMARK_SCALE_PERMILL,
        Self::PRIORITY,
        Self::PRIORITY_ENABLE,
        Self::OOM_KILL_GROUP,
    ];

    /// The reset ("None") parameters written when memory QoS is disabled.
    pub const RESET: MemoryQosParams = MemoryQosParams {
        min_limit_percent: 0,
        low_limit_percent: 0,
        throttling_percent: 0,
        wmark_ratio: 0,
        wmark_min_adj: 0,
        wmark_scale_permill: 50,
        priority: 0,
        priority_enable: 0,
        oom_kill_group: 0,
    };

    /// Values in [`Self::SPECS`] order.
    pub fn values(&self) -> [i64; 9] {
        [
            self.min_limit_percent,
            self.low_limit_percent,
            self.throttling_percent,
            self.wmark_ratio,
            self.wmark_min_adj,
            self.wmark_scale_permill,
            self.priority,
            self.priority_enable,
            self.oom_kill_group,
        ]
    }

    /// Mutable slot of the parameter at `index` of [`Self::SPECS`].
    pub fn slot_mut(&mut self, index: usize) -> Option<&mut i64> {
        Some(match index {
            0 => &mut self.min_limit_percent,
            1 => &mut self.low_limit_percent,
            2 => &mut self.throttling_percent,
            3 => &mut self.wmark_ratio,
            4 => &mut self.wmark_min_adj,
            5 => &mut self.wmark_scale_permill,
            6 => &mut self.priority,
            7 => &mut self.priority_enable,
            8 => &mut self.oom_kill_group,
            _ => return None,
        })
    }

    /// The first parameter outside its range, if any.
    pub fn out_of_range(&self) -> Option<(ParamSpec, i64)> {
        first_out_of_range(&Self::SPECS, self.values())
    }
}

/// A memory byte value that may be unlimited (`"max"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MaxOr {
    Bytes(i64),
    Max,
}

impl MaxOr {
    pub fn bytes(self) -> Option<i64> {
        match self {
            MaxOr::Bytes(b) => Some(b),
            MaxOr::Max => None,
        }
    }
}

impl fmt::Display for MaxOr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxOr::Bytes(b) => write!(f, "{b}"),
            MaxOr::Max => f.write_str("max"),
        }
    }
}

impl Serialize for MaxOr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MaxOr::Bytes(b) => s.serialize_i64(*b),
            MaxOr::Max => s.serialize_str("max"),
        }
    }
}

impl<'de> Deserialize<'de> for MaxOr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = MaxOr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count or \"max\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<MaxOr, E> {
                Ok(MaxOr::Bytes(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MaxOr, E> {
                i64::try_from(v)
                    .map(MaxOr::Bytes)
                    .map_err(|_| E::custom("byte count above i64"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MaxOr, E> {
                if v == "max" {
                    Ok(MaxOr::Max)
                } else {
                    Err(E::custom(format!("expected \"max\", got {v:?}")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The ten memory knobs of one cgroup (container level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerMemoryKnobs {
    #[serde(rename = "memory.min")]
    pub min: i64,
    #[serde(rename = "memory.low")]
    pub low: i64,
    #[serde(rename = "memory.high")]
    pub high: MaxOr,
    #[serde(rename = "memory.wmark_ratio")]
    pub wmark_ratio: i64,
    #[serde(rename = "memory.wmark_high")]
    pub wmark_high: MaxOr,
    #[serde(rename = "memory.wmark_scale_factor")]
    pub wmark_scale_factor: i64,
    #[serde(rename = "memory.wmark_min_adj")]
    pub wmark_min_adj: i64,
    #[serde(rename = "memory.priority")]
    pub priority: i64,
    #[serde(rename = "memory.use_priority_oom")]
    pub use_priority_oom: i64,
    #[serde(rename = "memory.oom.group")]
    pub oom_group: i64,
}

impl ContainerMemoryKnobs {
    /// The container knobs whose hard range is a parameter's (the knob carries the parameter's
    /// value): `(knob file name, value, range)`, in serialized order.
    pub fn ranged(&self) -> [(&'static str, i64, ParamSpec); 6] {
        use crate::knobs;
        [
            (
                knobs::MEMORY_WMARK_RATIO,
                self.wmark_ratio,
                MemoryQosParams::WMARK_RATIO,
            ),
            (
                knobs::MEMORY_WMARK_SCALE_FACTOR,
                self.wmark_scale_factor,
                MemoryQosParams::WMARK_SCALE_PERMILL,
            ),
            (
                knobs::MEMORY_WMARK_MIN_ADJ,
                self.wmark_min_adj,
                MemoryQosParams::WMARK_MIN_ADJ,
            ),
            (
                knobs::MEMORY_PRIORITY,
                self.priority,
                MemoryQosParams::PRIORITY,
            ),
            (
                knobs::MEMORY_USE_PRIORITY_OOM,
                self.use_priority_oom,
                MemoryQosParams::PRIORITY_ENABLE,
            ),
            (
                knobs::MEMORY_OOM_GROUP,
                self.oom_group,
                MemoryQosParams::OOM_KILL_GROUP,
            ),
        ]
    }
}

/// Pod-level memory knobs: the sums of the containers' min and low, or from the pod-level
/// memory request where the pod sets one (`spec.resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodMemoryKnobs {
    #[serde(rename = "memory.min")]
    pub min: i64,
    #[serde(rename = "memory.low")]
    pub low: i64,
    /// Only with a pod-level memory limit and `throttlingPercent` > 0; absent otherwise, so the
    /// annotation of every other pod keeps its bytes (docs/contract.md §1, Versioning).
    #[serde(
        rename = "memory.high",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub high: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedMemoryQos {
    pub enabled: bool,
    pub policy: MemoryQosPolicy,
    pub source: DecisionSource,
    pub params: MemoryQosParams,
    pub pod: PodMemoryKnobs,
    pub containers: BTreeMap<String, ContainerMemoryKnobs>,
}

/// Memory locality policy (canonical form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalityPolicy {
    #[serde(rename = "bestEffort")]
    BestEffort,
    #[serde(rename = "none")]
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedMemoryLocality {
    pub policy: LocalityPolicy,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub migrate_interval_minutes: Option<u32>,
    pub source: DecisionSource,
}

/// Batch cgroup values of one cgroup (`-1` = unlimited, as in cgroup v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchKnobs {
    #[serde(rename = "cpu.shares")]
    pub cpu_shares: i64,
    #[serde(rename = "cpu.cfs_quota_us")]
    pub cpu_cfs_quota_us: i64,
    #[serde(rename = "memory.limit_in_bytes")]
    pub memory_limit_in_bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedBatch {
    pub pod: BatchKnobs,
    pub containers: BTreeMap<String, BatchKnobs>,
}

/// The whole `koordinator.sh/resolved-qos` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedQos {
    pub version: u32,
    pub qos_class: QosClass,
    pub qos_class_source: QosClassSource,
    #[serde(rename = "memoryQOS")]
    pub memory_qos: ResolvedMemoryQos,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_locality: Option<ResolvedMemoryLocality>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub batch: Option<ResolvedBatch>,
    /// Group identity (`cpu.bvt_warp_ns`); an optional section added within version 1.
    #[serde(rename = "cpuQOS", skip_serializing_if = "Option::is_none", default)]
    pub cpu_qos: Option<ResolvedCpuQos>,
    /// L3 cache / memory bandwidth partition; an optional section added within version 1.
    #[serde(
        rename = "resctrlQOS",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub resctrl_qos: Option<ResolvedResctrlQos>,
    /// Proactive reclaim of cold memory; an optional section added within version 1.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub proactive_reclaim: Option<ResolvedProactiveReclaim>,
}

/// Proactive reclaim of cold memory (docs/contract.md §1, `proactiveReclaim`): while a
/// container's memory stall (`memory.pressure` `some`) stays under the target over an interval,
/// the node asks its cgroup's `memory.reclaim` for a step of its `memory.current`; never below
/// the container's floor. An optional section within version 1, present only when a source
/// states it, so every other pod's annotation keeps its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedProactiveReclaim {
    pub enabled: bool,
    pub params: ProactiveReclaimParams,
    pub source: DecisionSource,
    /// Per container: the bytes the loop never reclaims below, `max(memory.min, floorPercent
    /// of the container's memory request)`; every container of the memory QoS section.
    pub containers: BTreeMap<String, ProactiveReclaimFloor>,
}

/// The four parameters of proactive reclaim, resolved (never absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProactiveReclaimParams {
    /// How often the stall is read and a step asked, in seconds.
    pub interval_seconds: i64,
    /// The stall (microseconds of `some` in `memory.pressure`) one interval may hold before the
    /// loop backs off.
    pub stall_target_micros: i64,
    /// The reference step, in thousandths of the container's `memory.current`: the loop starts
    /// a container at 1/32 of it and doubles it per step nothing came back from, up to a tenth.
    pub step_permill: i64,
    /// The floor's share of the container's memory request, in percent (below `memory.min`
    /// counts as `memory.min`).
    pub floor_percent: i64,
}

impl ProactiveReclaimParams {
    pub const INTERVAL_SECONDS: ParamSpec = ParamSpec {
        name: "intervalSeconds",
        min: 1,
        max: 600,
    };
    pub const STALL_TARGET_MICROS: ParamSpec = ParamSpec {
        name: "stallTargetMicros",
        min: 100,
        max: 1_000_000,
    };
    pub const STEP_PERMILL: ParamSpec = ParamSpec {
        name: "stepPermill",
        min: 1,
        max: 100,
    };
    pub const FLOOR_PERCENT: ParamSpec = ParamSpec {
        name: "floorPercent",
        min: 0,
        max: 100,
    };

    /// Names and hard ranges, in serialized order (webhook input and applier reading alike).
    pub const SPECS: [ParamSpec; 4] = [
        Self::INTERVAL_SECONDS,
        Self::STALL_TARGET_MICROS,
        Self::STEP_PERMILL,
        Self::FLOOR_PERCENT,
    ];

    /// TMO's open-source loop (senpai) by default: 10 ms of stall per 6 s, at most 1% of the
    /// cgroup a step; the floor is `memory.min` alone.
    pub const DEFAULT: ProactiveReclaimParams = ProactiveReclaimParams {
        interval_seconds: 6,
        stall_target_micros: 10_000,
        step_permill: 10,
        floor_percent: 0,
    };

    /// Values in [`Self::SPECS`] order.
    pub fn values(&self) -> [i64; 4] {
        [
            self.interval_seconds,
            self.stall_target_micros,
            self.step_permill,
            self.floor_percent,
        ]
    }

    /// Mutable slot of the parameter at `index` of [`Self::SPECS`].
    pub fn slot_mut(&mut self, index: usize) -> Option<&mut i64> {
        Some(match index {
            0 => &mut self.interval_seconds,
            1 => &mut self.stall_target_micros,
            2 => &mut self.step_permill,
            3 => &mut self.floor_percent,
            _ => return None,
        })
    }

    /// The first parameter outside its range, if any.
    pub fn out_of_range(&self) -> Option<(ParamSpec, i64)> {
        first_out_of_range(&Self::SPECS, self.values())
    }
}

/// One container's floor for proactive reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProactiveReclaimFloor {
    pub floor_bytes: i64,
}

/// The floor of a container: its `memory.min`, or `floor_percent` of its memory request if
/// that is more (no request: `memory.min`). The webhook writes it; the applier recomputes it
/// from the pod spec and the annotation's `memory.min` before it trusts the annotation's.
pub fn proactive_reclaim_floor(
    memory_min: i64,
    request_bytes: Option<i64>,
    floor_percent: i64,
) -> i64 {
    let share = request_bytes
        .map(|r| i64::try_from(i128::from(r) * i128::from(floor_percent) / 100).unwrap_or(i64::MAX))
        .unwrap_or(0);
    memory_min.max(share)
}

/// CPU QoS: Alibaba group identity, `cpu.bvt_warp_ns` in -1..2 (LS 2 preempts BE -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedCpuQos {
    pub enabled: bool,
    pub group_identity: i64,
    pub source: DecisionSource,
}

impl ResolvedCpuQos {
    pub const GROUP_IDENTITY_RANGE: (i64, i64) = (-1, 2);
}

/// Resctrl QoS: the class's slice of L3 ways (start..end percent) and memory bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedResctrlQos {
    pub enabled: bool,
    pub cat_range_start_percent: i64,
    pub cat_range_end_percent: i64,
    pub mba_percent: i64,
    pub source: DecisionSource,
}

/// Why an annotation could not be read as a [`ResolvedQos`].
#[derive(Debug, thiserror::Error)]
pub enum ResolvedQosError {
    #[error("{key}: not valid JSON of the resolved-qos contract: {0}", key = crate::keys::ANNOTATION_RESOLVED_QOS)]
    Json(#[from] serde_json::Error),
    #[error("{key}: version {0} is not supported (this build reads version {RESOLVED_QOS_VERSION})", key = crate::keys::ANNOTATION_RESOLVED_QOS)]
    Version(u64),
}

impl ResolvedQos {
    /// Compact JSON in stable key order, as written into the annotation.
    ///
    /// Written by hand (`resolved_json.rs`), byte-identical to `serde_json::to_string` of the
    /// derived `Serialize` (tested), at a fraction of its cost: one per admission.
    pub fn to_annotation(&self) -> String {
        let mut out = Vec::with_capacity(1024);
        self.write_annotation(&mut out);
        // Only UTF-8 goes in: ASCII text and escaped `&str`s.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Reads the annotation, checking the version first so a newer writer gets a clear error.
    pub fn from_annotation(s: &str) -> Result<Self, ResolvedQosError> {
        #[derive(Deserialize)]
        struct VersionOnly {
            version: u64,
        }
        let v: VersionOnly = serde_json::from_str(s)?;
        if v.version != u64::from(RESOLVED_QOS_VERSION) {
            return Err(ResolvedQosError::Version(v.version));
        }
        Ok(serde_json::from_str(s)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example document of `docs/contract.md`, "## 1. The annotation".
    const CONTRACT_EXAMPLE: &str = r#"{"version":1,"qosClass":"LS","qosClassSource":"label","memoryQOS":{"enabled":true,"policy":"auto","source":"pod-annotation","params":{"minLimitPercent":0,"lowLimitPercent":0,"throttlingPercent":0,"wmarkRatio":95,"wmarkMinAdj":-25,"wmarkScalePermill":20,"priority":0,"priorityEnable":0,"oomKillGroup":0},"pod":{"memory.min":0,"memory.low":0},"containers":{"redis":{"memory.min":0,"memory.low":0,"memory.high":"max","memory.wmark_ratio":95,"memory.wmark_high":6120325120,"memory.wmark_scale_factor":20,"memory.wmark_min_adj":-25,"memory.priority":0,"memory.use_priority_oom":0,"memory.oom.group":0}}},"memoryLocality":{"policy":"bestEffort","migrateIntervalMinutes":10,"source":"pod-annotation"},"batch":{"pod":{"cpu.shares":71680,"cpu.cfs_quota_us":7000000,"memory.limit_in_bytes":23622320128},"containers":{"ffmpeg":{"cpu.shares":71680,"cpu.cfs_quota_us":7000000,"memory.limit_in_bytes":23622320128}}}}"#;

    #[test]
    fn contract_example_round_trips_byte_for_byte() {
        let parsed = ResolvedQos::from_annotation(CONTRACT_EXAMPLE).expect("parses");
        assert_eq!(parsed.to_annotation(), CONTRACT_EXAMPLE);
        assert_eq!(parsed.memory_qos.containers["redis"].high, MaxOr::Max);
    }

    #[test]
    fn rejects_other_versions_and_forged_fields() {
        let v2 = CONTRACT_EXAMPLE.replacen("\"version\":1", "\"version\":2", 1);
        assert!(matches!(
            ResolvedQos::from_annotation(&v2),
            Err(ResolvedQosError::Version(2))
        ));
        let forged = CONTRACT_EXAMPLE.replacen(
            "\"memory.min\":0,\"memory.low\":0}",
            "\"memory.min\":0,\"memory.low\":0,\"x\":1}",
            1,
        );
        assert!(ResolvedQos::from_annotation(&forged).is_err());
        let bad_max =
            CONTRACT_EXAMPLE.replacen("\"memory.high\":\"max\"", "\"memory.high\":\"../x\"", 1);
        assert!(ResolvedQos::from_annotation(&bad_max).is_err());
    }

    #[test]
    fn proactive_reclaim_defaults_and_floor() {
        assert_eq!(ProactiveReclaimParams::DEFAULT.out_of_range(), None);
        let mut p = ProactiveReclaimParams::DEFAULT;
        p.step_permill = 101;
        assert_eq!(
            p.out_of_range().map(|(s, v)| (s.name, v)),
            Some(("stepPermill", 101))
        );
        // (memory.min, request, floorPercent) -> floor
        for (min, request, percent, floor) in [
            (0, None, 50, 0),
            (0, Some(1000), 50, 500),
            (700, Some(1000), 50, 700),
            (0, Some(1000), 0, 0),
            (0, Some(i64::MAX), 100, i64::MAX),
        ] {
            assert_eq!(proactive_reclaim_floor(min, request, percent), floor);
        }
    }

    #[test]
    fn param_ranges() {
        assert_eq!(MemoryQosParams::RESET.out_of_range(), None);
        let mut p = MemoryQosParams::RESET;
        p.wmark_min_adj = -26;
        assert_eq!(
            p.out_of_range().map(|(s, v)| (s.name, v)),
            Some(("wmarkMinAdj", -26))
        );
        assert!(MemoryQosParams::WMARK_MIN_ADJ.contains(-25));
        assert!(!MemoryQosParams::WMARK_MIN_ADJ.contains(51));
        p.wmark_min_adj = 0;
        p.wmark_scale_permill = 0;
        assert_eq!(
            p.out_of_range().map(|(s, _)| s.name),
            Some("wmarkScalePermill")
        );
    }
}
