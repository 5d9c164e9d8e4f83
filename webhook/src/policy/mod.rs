//! The cluster-wide inputs of resolution, parsed and validated.
//!
//! `ack-slo-config` (`resource-qos-config`) gives per-class memory QoS, locality, CPU QoS,
//! resctrl and proactive reclaim, and (`colocation-config`) whether colocation is on;
//! `ack-slo-pod-config` (`memory-qos`, `proactive-reclaim`) gives namespace allow/deny lists.
//! Parsing is pure and happens once per ConfigMap change, never per admission; [`load`] is the
//! one place that reads them from files or from a watched ConfigMap's data.

mod cluster;
mod colocation;
mod config;
mod cpu_qos_setting;
mod fields;
pub mod load;
mod namespace;
mod proactive_reclaim_setting;
mod resctrl_setting;

pub use cluster::{ClassStrategy, ClusterQosConfig, ParseOutcome};
pub use colocation::Colocation;
pub use config::PolicyConfig;
pub use cpu_qos_setting::{CpuQosSetting, parse_cpu_qos_setting};
pub use fields::{
    FieldError, LocalitySetting, ParamOverrides, parse_int_in_range, parse_locality_setting,
    parse_param_overrides, parse_policy_name,
};
pub use load::{
    ClusterConfigMap, ConfigMapPolicy, NamespaceConfigMap, PolicyLoadError, load_policy,
};
pub use namespace::{NamespaceQosConfig, NamespaceVerdict};
pub use proactive_reclaim_setting::{
    ProactiveReclaimOverrides, ProactiveReclaimSetting, parse_proactive_reclaim_setting,
};
pub use resctrl_setting::{
    ResctrlSetting, check_resctrl_slice, effective_resctrl, parse_resctrl_setting,
    recommended_resctrl,
};
