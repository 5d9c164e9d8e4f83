//! [`PolicyConfig`]: the two parsed ConfigMaps together, the snapshot an admission reads.

use super::cluster::ClusterQosConfig;
use super::namespace::NamespaceQosConfig;

/// Everything resolution reads besides the pod itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyConfig {
    pub cluster: ClusterQosConfig,
    pub namespaces: NamespaceQosConfig,
}
