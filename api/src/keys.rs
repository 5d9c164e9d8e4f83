//! Label, annotation and resource keys.

/// Koordinator QoS class label (`LSE LSR LS BE SYSTEM`).
pub const LABEL_QOS_CLASS: &str = "koordinator.sh/qosClass";
/// Legacy ACK QoS class label, honoured when the Koordinator one is absent or invalid.
pub const LABEL_LEGACY_QOS_CLASS: &str = "alibabacloud.com/qosClass";
/// Pod memory QoS annotation (`{"policy": "auto"|"default"|"none", ...params}`).
pub const ANNOTATION_MEMORY_QOS: &str = "koordinator.sh/memoryQOS";
/// Legacy ACK memory QoS annotation; the Koordinator one wins when both are set.
pub const ANNOTATION_LEGACY_MEMORY_QOS: &str = "alibabacloud.com/memoryQOS";
/// Pod memory locality annotation (`{"policy": "bestEffort"|"none", "migrateIntervalMinutes": N}`).
pub const ANNOTATION_MEMORY_LOCALITY: &str = "koordinator.sh/memoryLocality";
/// Pod CPU QoS annotation (`{"enable": bool, "groupIdentity": -1..2}`).
pub const ANNOTATION_CPU_QOS: &str = "koordinator.sh/cpuQOS";
/// Pod proactive reclaim annotation (`{"enable": bool, "intervalSeconds": N, "stallTargetMicros": N,
/// "stepPermill": N, "floorPercent": N}`).
pub const ANNOTATION_PROACTIVE_RECLAIM: &str = "koordinator.sh/proactiveReclaim";
/// The webhook's decision, read by the applier (see [`crate::resolved`]).
pub const ANNOTATION_RESOLVED_QOS: &str = "koordinator.sh/resolved-qos";
/// Koordinator's extended resource spec, written so a stock koordlet understands batch pods.
pub const ANNOTATION_EXTENDED_RESOURCE_SPEC: &str = "node.koordinator.sh/extended-resource-spec";
/// Namespace opt-in label of the webhook's namespaceSelector.
pub const LABEL_WEBHOOK_OPT_IN: &str = "koordinator.sh/qos-webhook";

/// Batch CPU, in integer milli-cores.
pub const RESOURCE_BATCH_CPU: &str = "kubernetes.io/batch-cpu";
/// Batch memory, in bytes.
pub const RESOURCE_BATCH_MEMORY: &str = "kubernetes.io/batch-memory";
pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";

/// Default cluster ConfigMap (name, namespace, key).
pub const CLUSTER_CONFIGMAP: &str = "ack-slo-config";
pub const CLUSTER_CONFIGMAP_KEY: &str = "resource-qos-config";
/// Default namespace ConfigMap (name, key).
pub const NAMESPACE_CONFIGMAP: &str = "ack-slo-pod-config";
pub const NAMESPACE_CONFIGMAP_KEY: &str = "memory-qos";
/// The namespace ConfigMap's lists for proactive reclaim (same shape as `memory-qos`).
pub const NAMESPACE_CONFIGMAP_PROACTIVE_RECLAIM_KEY: &str = "proactive-reclaim";
pub const CONFIG_NAMESPACE: &str = "kube-system";
