//! Async reclaim's metric families, registered in the applier's registry.
//!
//! Per pod, not per container: `namespace` and `pod` label sets exist only for pods under
//! emulation on this node (at most the kubelet's `maxPods`) and are removed with the pod, so
//! the series count is bounded by the node's pod count whatever the containers do.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{CounterVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

#[derive(Clone)]
pub struct ReclaimMetrics {
    /// Bytes the kernel reclaimed for `memory.reclaim` writes, by `why` (`wmark`: async
    /// reclaim; `be-first`: node pressure).
    pub bytes: IntCounterVec,
    /// `memory.reclaim` writes, by `why` and how they ended (`full`, `short`, `failed`).
    pub passes: IntCounterVec,
    /// Seconds spent in `memory.reclaim` writes, by `why`.
    pub seconds: CounterVec,
    /// Ticks that found the node's free memory under the BE-first floor.
    pub be_first_episodes: IntCounter,
    /// BE throttles set (a container's `memory.high` held at its usage under node pressure).
    pub throttles: IntCounterVec,
    /// Containers whose `memory.high` the BE throttle holds now.
    pub throttled: IntGauge,
    /// The node's free memory at the last BE-first look (`/proc/zoneinfo`), bytes.
    pub node_free: IntGauge,
    /// Reclaims due but not made because the worker had spent its CPU budget for the second.
    pub over_budget: IntCounter,
    /// Containers under emulation.
    pub containers: IntGauge,
    /// 1 per knob this node emulates, by knob and by what emulates it.
    pub emulated: IntGaugeVec,
}

const POD: [&str; 3] = ["namespace", "pod", "why"];

impl ReclaimMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        let per_pod = |name: &str, help: &str, extra: &[&'static str]| {
            let labels: Vec<&str> = POD.iter().copied().chain(extra.iter().copied()).collect();
            register(registry, IntCounterVec::new(Opts::new(name, help), &labels))
        };
        Ok(Self {
            bytes: per_pod(
                "koord_applier_async_reclaim_bytes_total",
                "Bytes reclaimed from the pod's containers with memory.reclaim, by why: wmark (async reclaim below wmark_high), be-first (node memory pressure, BE containers first).",
                &[],
            )?,
            passes: per_pod(
                "koord_applier_async_reclaim_writes_total",
                "memory.reclaim writes for the pod's containers, by why and result: full, short (the kernel found less to reclaim; the container backs off), failed.",
                &["result"],
            )?,
            seconds: register(
                registry,
                CounterVec::new(
                    Opts::new(
                        "koord_applier_async_reclaim_seconds_total",
                        "Time spent in memory.reclaim writes for the pod's containers, by why.",
                    ),
                    &POD,
                ),
            )?,
            be_first_episodes: register(
                registry,
                IntCounter::new(
                    "koord_applier_be_first_episodes_total",
                    "Worker ticks that found the node's free memory under the BE-first floor and reclaimed from BE containers.",
                ),
            )?,
            throttles: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_be_throttles_total",
                        "BE throttles set on the pod's containers: memory.high held at the container's usage while the node's free memory is under the BE-first floor (Alibaba's memory.wmark_min_adj throttle, emulated).",
                    ),
                    &["namespace", "pod"],
                ),
            )?,
            throttled: register(
                registry,
                IntGauge::new(
                    "koord_applier_be_throttled_containers",
                    "BE containers whose memory.high the BE-first throttle holds now.",
                ),
            )?,
            node_free: register(
                registry,
                IntGauge::new(
                    "koord_applier_be_first_node_free_bytes",
                    "The node's free memory (/proc/zoneinfo) at the BE-first worker's last look.",
                ),
            )?,
            over_budget: register(
                registry,
                IntCounter::new(
                    "koord_applier_async_reclaim_over_budget_total",
                    "Reclaims due but deferred because the worker had spent its CPU budget for the second.",
                ),
            )?,
            containers: register(
                registry,
                IntGauge::new(
                    "koord_applier_async_reclaim_containers",
                    "Containers whose usage the async reclaim emulation keeps below wmark_high.",
                ),
            )?,
            emulated: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_emulated_knobs",
                        "Knobs this node's kernel lacks that the applier emulates (1 each), by what emulates them.",
                    ),
                    &["knob", "by"],
                ),
            )?,
        })
    }

    /// Drops a pod's series.
    pub fn forget(&self, namespace: &str, pod: &str) {
        let _ = self.throttles.remove_label_values(&[namespace, pod]);
        for why in ["wmark", "be-first"] {
            let _ = self.bytes.remove_label_values(&[namespace, pod, why]);
            let _ = self.seconds.remove_label_values(&[namespace, pod, why]);
            for result in ["full", "short", "failed"] {
                let _ = self
                    .passes
                    .remove_label_values(&[namespace, pod, why, result]);
            }
        }
    }
}
