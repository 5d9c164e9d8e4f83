//! `ack-slo-config` / `resource-qos-config`: per-class memory QoS, locality, CPU QoS, resctrl
//! and proactive reclaim.

use koord_api::QosClass;
use koord_api::keys::CLUSTER_CONFIGMAP_KEY;
use serde_json::Value;

use super::cpu_qos_setting::{CpuQosSetting, parse_cpu_qos_setting};
use super::fields::{
    FieldError, LocalitySetting, ParamOverrides, parse_enable, parse_locality_setting,
    parse_param_overrides,
};
use super::proactive_reclaim_setting::{ProactiveReclaimSetting, parse_proactive_reclaim_setting};
use super::resctrl_setting::{ResctrlSetting, check_resctrl_slice, parse_resctrl_setting};

/// What the cluster ConfigMap says about one class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStrategy {
    /// `memoryQOS.enable`; `None` when the class does not say.
    pub memory_qos_enable: Option<bool>,
    pub memory_qos_params: ParamOverrides,
    pub memory_locality: Option<LocalitySetting>,
    /// `cpuQOS`, when the class states it.
    pub cpu_qos: Option<CpuQosSetting>,
    /// `resctrlQOS`, when the class states it.
    pub resctrl_qos: Option<ResctrlSetting>,
    /// `proactiveReclaim`, when the class states it.
    pub proactive_reclaim: Option<ProactiveReclaimSetting>,
}

/// The cluster strategy. Koordinator has no `lseClass`: LSE pods read `lsrClass`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterQosConfig {
    pub lsr: ClassStrategy,
    pub ls: ClassStrategy,
    pub be: ClassStrategy,
    pub system: ClassStrategy,
}

/// A parsed ConfigMap plus what was accepted but not used, for the caller to log.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseOutcome<T> {
    pub config: T,
    pub notes: Vec<String>,
}

/// The class whose recommended values fill the gaps of a class key.
fn class_of(key: &str) -> QosClass {
    match key {
        "lsrClass" => QosClass::Lsr,
        "beClass" => QosClass::Be,
        "systemClass" => QosClass::System,
        _ => QosClass::Ls,
    }
}

const CLASS_KEYS: [&str; 4] = ["lsrClass", "lsClass", "beClass", "systemClass"];

impl ClusterQosConfig {
    pub fn class(&self, class: QosClass) -> &ClassStrategy {
        match class {
            QosClass::Lse | QosClass::Lsr => &self.lsr,
            QosClass::Ls => &self.ls,
            QosClass::Be => &self.be,
            QosClass::System => &self.system,
        }
    }

    fn class_mut(&mut self, key: &str) -> Option<&mut ClassStrategy> {
        Some(match key {
            "lsrClass" => &mut self.lsr,
            "lsClass" => &mut self.ls,
            "beClass" => &mut self.be,
            "systemClass" => &mut self.system,
            _ => return None,
        })
    }

    /// Parses the JSON text of the `resource-qos-config` key.
    pub fn parse(text: &str) -> Result<ParseOutcome<Self>, FieldError> {
        let root_path = CLUSTER_CONFIGMAP_KEY;
        let root: Value = serde_json::from_str(text)
            .map_err(|e| FieldError::new(root_path, format!("not valid JSON: {e}")))?;
        let root = root.as_object().ok_or_else(|| {
            FieldError::new(root_path, "must be a JSON object with a clusterStrategy")
        })?;
        let mut config = ClusterQosConfig::default();
        let mut notes = Vec::new();
        for (key, value) in root {
            match key.as_str() {
                "clusterStrategy" => config.parse_cluster_strategy(
                    value,
                    &format!("{root_path}.clusterStrategy"),
                    &mut notes,
                )?,
                "nodeStrategies" => {
                    let n = value.as_array().map_or(0, Vec::len);
                    if n > 0 {
                        notes.push(format!(
                            "{root_path}.nodeStrategies: {n} node strategies accepted and ignored: the node is not known at admission"
                        ));
                    }
                }
                other => notes.push(format!("{root_path}.{other}: not used by this product")),
            }
        }
        Ok(ParseOutcome { config, notes })
    }

    fn parse_cluster_strategy(
        &mut self,
        value: &Value,
        path: &str,
        notes: &mut Vec<String>,
    ) -> Result<(), FieldError> {
        let obj = value
            .as_object()
            .ok_or_else(|| FieldError::new(path, "must be a JSON object"))?;
        for (key, class_value) in obj {
            let class_path = format!("{path}.{key}");
            let Some(class) = self.class_mut(key) else {
                // `policies`, `cgroupRoot` and unknown keys are Koordinator features we do not use.
                if !CLASS_KEYS.contains(&key.as_str()) {
                    notes.push(format!("{class_path}: not used by this product"));
                }
                continue;
            };
            class.parse(class_of(key), class_value, &class_path)?;
        }
        Ok(())
    }
}

impl ClassStrategy {
    /// One class key (`lsClass`, ...) of the cluster strategy; `class` fills the gaps of a
    /// resctrl partition with its recommended values.
    fn parse(&mut self, class: QosClass, value: &Value, path: &str) -> Result<(), FieldError> {
        let obj = value
            .as_object()
            .ok_or_else(|| FieldError::new(path, "must be a JSON object"))?;
        for (section, section_value) in obj {
            let section_path = format!("{path}.{section}");
            match section.as_str() {
                "memoryQOS" => {
                    let m = section_value
                        .as_object()
                        .ok_or_else(|| FieldError::new(&section_path, "must be a JSON object"))?;
                    self.memory_qos_enable = match m.get("enable") {
                        Some(v) => parse_enable(v, &format!("{section_path}.enable"))?,
                        None => None,
                    };
                    self.memory_qos_params = parse_param_overrides(m, &section_path, &["enable"])?;
                }
                "memoryLocality" => {
                    self.memory_locality =
                        Some(parse_locality_setting(section_value, &section_path)?)
                }
                "cpuQOS" => {
                    self.cpu_qos = Some(parse_cpu_qos_setting(section_value, &section_path)?)
                }
                "resctrlQOS" => {
                    let setting = parse_resctrl_setting(section_value, &section_path)?;
                    if setting.enable == Some(true) {
                        check_resctrl_slice(class, &setting, &section_path)?;
                    }
                    self.resctrl_qos = Some(setting);
                }
                "proactiveReclaim" => {
                    self.proactive_reclaim = Some(parse_proactive_reclaim_setting(
                        section_value,
                        &section_path,
                    )?)
                }
                // blkioQOS, networkQOS: other features of the reference.
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_api::LocalityPolicy;

    #[test]
    fn reference_examples_parse() {
        let ack = r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true}}, "beClass": {"memoryQOS": {"enable": true}}}}"#;
        let c = ClusterQosConfig::parse(ack).expect("ack-slo-config").config;
        assert_eq!(c.ls.memory_qos_enable, Some(true));
        assert_eq!(c.be.memory_qos_enable, Some(true));
        assert_eq!(c.lsr.memory_qos_enable, None);
        assert_eq!(c.class(QosClass::Lse), &c.lsr);

        let loc =
            r#"{"clusterStrategy": {"lsClass": {"memoryLocality": {"policy": "bestEffort"}}}}"#;
        let c = ClusterQosConfig::parse(loc).expect("locality").config;
        assert_eq!(
            c.ls.memory_locality.map(|l| l.policy),
            Some(LocalityPolicy::BestEffort)
        );
    }

    #[test]
    fn proactive_reclaim_per_class_and_lse_reads_lsr() {
        let text = r#"{"clusterStrategy": {"lsrClass": {"proactiveReclaim": {"enable": true, "floorPercent": 50}},
            "beClass": {"proactiveReclaim": {}}}}"#;
        let c = ClusterQosConfig::parse(text).expect("parses").config;
        let lsr = c.lsr.proactive_reclaim.expect("lsr states it");
        assert_eq!(lsr.enable, Some(true));
        assert_eq!(lsr.params.0, [None, None, None, Some(50)]);
        assert_eq!(c.class(QosClass::Lse).proactive_reclaim, Some(lsr));
        assert_eq!(
            c.be.proactive_reclaim,
            Some(ProactiveReclaimSetting::default())
        );
        assert_eq!(c.ls.proactive_reclaim, None);
    }

    #[test]
    fn node_strategies_are_noted() {
        let text = r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": 50}}},
            "nodeStrategies": [{"name": "a", "nodeSelector": {}, "lsClass": {"memoryQOS": {"enable": false}}}]}"#;
        let out = ClusterQosConfig::parse(text).expect("parses");
        assert_eq!(out.config.ls.memory_qos_params.0[0], Some(50));
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains("nodeStrategies: 1 node strategies accepted and ignored")),
            "{:?}",
            out.notes
        );
    }

    #[test]
    fn broken_configs_name_the_field() {
        for (text, msg) in [
            ("{", "resource-qos-config: not valid JSON"),
            ("[]", "resource-qos-config: must be a JSON object"),
            (
                r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": "yes"}}}}"#,
                "resource-qos-config.clusterStrategy.lsClass.memoryQOS.enable: \"yes\" is not true or false",
            ),
            (
                r#"{"clusterStrategy": {"beClass": {"memoryQOS": {"wmarkMinAdj": 99}}}}"#,
                "resource-qos-config.clusterStrategy.beClass.memoryQOS.wmarkMinAdj: 99 is out of range (allowed -25..50)",
            ),
            (
                r#"{"clusterStrategy": {"lsrClass": {"proactiveReclaim": {"enable": true, "stepPermill": 0}}}}"#,
                "resource-qos-config.clusterStrategy.lsrClass.proactiveReclaim.stepPermill: 0 is out of range (allowed 1..100)",
            ),
            (
                r#"{"clusterStrategy": {"lsClass": {"proactiveReclaim": true}}}"#,
                "resource-qos-config.clusterStrategy.lsClass.proactiveReclaim: true is not a JSON object",
            ),
            (
                r#"{"clusterStrategy": {"lsClass": {"memoryLocality": {"policy": "always"}}}}"#,
                "resource-qos-config.clusterStrategy.lsClass.memoryLocality.policy: unknown policy",
            ),
        ] {
            let err = ClusterQosConfig::parse(text).expect_err(text).to_string();
            assert!(err.starts_with(msg), "{err} should start with {msg}");
        }
    }
}
