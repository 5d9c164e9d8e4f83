//! The cluster-wide inputs of resolution, parsed and validated (pure; no IO).
//!
//! `ack-slo-config` (`resource-qos-config`) gives per-class memory QoS and locality;
//! `ack-slo-pod-config` (`memory-qos`) gives namespace allow/deny lists. Parsing happens once
//! per ConfigMap change, never per admission.

mod cluster;
mod cpu_resctrl;
mod fields;
mod namespace;

pub use cluster::{ClassStrategy, ClusterQosConfig, ParseOutcome};
pub use cpu_resctrl::{
    CpuQosSetting, ResctrlSetting, check_resctrl_slice, effective_resctrl, parse_cpu_qos_setting,
    parse_int_in_range, parse_resctrl_setting, recommended_resctrl,
};
pub use fields::{
    FieldError, LocalitySetting, ParamOverrides, parse_locality_setting, parse_param_overrides,
    parse_policy_name,
};
pub use namespace::{NamespaceQosConfig, NamespaceVerdict};

/// Everything resolution reads besides the pod itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyConfig {
    pub cluster: ClusterQosConfig,
    pub namespaces: NamespaceQosConfig,
}
