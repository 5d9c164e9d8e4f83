//! Proactive reclaim's metric families, registered in the applier's registry.
//!
//! Per container (`namespace`, `pod`, `container`): the loop runs per container, so its stall,
//! target and what it took are per container. The label sets exist only for containers the
//! loop runs for on this node and are removed when the container leaves the loop (its pod
//! deleted, or no longer opted in), so the series count is bounded by the node's containers.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct ProactiveMetrics {
    /// Bytes the kernel reclaimed for the loop's `memory.reclaim` writes, per container.
    pub bytes: IntCounterVec,
    /// The node's total of `bytes`.
    pub node_bytes: IntCounter,
    /// The stall of the container's last interval (`memory.pressure` `some`), seconds.
    pub stall: GaugeVec,
    /// The container's stall target per interval, seconds.
    pub target: GaugeVec,
    /// Back-offs, per container and `why`: `stall` (the stall reached the target), `refault`
    /// (the container faulted back half of the last step), `short` (the kernel found less to
    /// reclaim than asked).
    pub backoffs: IntCounterVec,
    /// Pods that ask for the loop and do not get it, by `reason`.
    pub refused: IntCounterVec,
    /// Reclaims due but not written because the tick had spent its write budget.
    pub over_budget: IntCounter,
    /// Containers the loop runs for now.
    pub containers: IntGauge,
}

const CONTAINER: [&str; 3] = ["namespace", "pod", "container"];
const WHY: [&str; 3] = ["stall", "refault", "short"];

impl ProactiveMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        Ok(Self {
            bytes: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_bytes_total",
                        "Bytes the kernel reclaimed from the container for the proactive reclaim loop's memory.reclaim writes.",
                    ),
                    &CONTAINER,
                ),
            )?,
            node_bytes: register(
                registry,
                IntCounter::new(
                    "koord_applier_proactive_reclaim_node_bytes_total",
                    "Bytes the proactive reclaim loop reclaimed on this node, all containers.",
                ),
            )?,
            stall: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_stall_seconds",
                        "The container's memory stall (memory.pressure some) over the loop's last interval, seconds.",
                    ),
                    &CONTAINER,
                ),
            )?,
            target: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_stall_target_seconds",
                        "The stall per interval the loop reclaims under (stallTargetMicros), seconds.",
                    ),
                    &CONTAINER,
                ),
            )?,
            backoffs: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_backoffs_total",
                        "Back-offs of the container's loop, by why: stall (the stall reached the target), refault (the container faulted back half of the last step), short (the kernel found less to reclaim than asked).",
                    ),
                    &["namespace", "pod", "container", "why"],
                ),
            )?,
            refused: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_refused_pods_total",
                        "Pods whose annotation enables proactive reclaim and that the loop does not run for, by reason (counted once per version of the pod).",
                    ),
                    &["reason"],
                ),
            )?,
            over_budget: register(
                registry,
                IntCounter::new(
                    "koord_applier_proactive_reclaim_over_budget_total",
                    "Reclaims due but not written because the tick had spent its write budget (--proactive-reclaim-write-budget-ms).",
                ),
            )?,
            containers: register(
                registry,
                IntGauge::new(
                    "koord_applier_proactive_reclaim_containers",
                    "Containers the proactive reclaim loop runs for on this node.",
                ),
            )?,
        })
    }

    /// A container joins the loop: its target, and its counters at 0 (so `rate()` and the
    /// dashboard have them from the start, not from the first reclaim or back-off).
    pub fn join(&self, namespace: &str, pod: &str, container: &str, target_seconds: f64) {
        let labels = [namespace, pod, container];
        self.target.with_label_values(&labels).set(target_seconds);
        self.bytes.with_label_values(&labels);
        for why in WHY {
            self.backoffs
                .with_label_values(&[namespace, pod, container, why]);
        }
    }

    /// Drops a container's series.
    pub fn forget(&self, namespace: &str, pod: &str, container: &str) {
        let labels = [namespace, pod, container];
        let _ = self.bytes.remove_label_values(&labels);
        let _ = self.stall.remove_label_values(&labels);
        let _ = self.target.remove_label_values(&labels);
        for why in WHY {
            let _ = self
                .backoffs
                .remove_label_values(&[namespace, pod, container, why]);
        }
    }
}
