//! [`PolicyConfig`]: the two parsed ConfigMaps together, the snapshot an admission reads.

use super::cluster::ClusterQosConfig;
use super::colocation::Colocation;
use super::namespace::NamespaceQosConfig;

/// Everything resolution reads besides the pod itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyConfig {
    /// `resource-qos-config` of the cluster ConfigMap.
    pub cluster: ClusterQosConfig,
    /// `memory-qos` of the namespace ConfigMap.
    pub namespaces: NamespaceQosConfig,
    /// `proactive-reclaim` of the namespace ConfigMap.
    pub proactive_reclaim_namespaces: NamespaceQosConfig,
    /// `colocation-config` of the cluster ConfigMap: whether BE pods get batch resources.
    pub colocation: Colocation,
}
