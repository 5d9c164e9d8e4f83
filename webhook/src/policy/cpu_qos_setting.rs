//! `cpuQOS` (group identity) as the cluster ConfigMap classes and the `koordinator.sh/cpuQOS`
//! pod annotation state it (docs/contract.md §2, CPU QoS and resctrl).

use serde_json::Value;

use super::fields::{FieldError, json_object, parse_enable, parse_int_in_range};

/// Group identity as one source states it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuQosSetting {
    pub enable: Option<bool>,
    pub group_identity: Option<i64>,
}

/// Koordinator's CPU QoS keys that this product accepts and ignores.
const IGNORED_CPU_QOS_KEYS: [&str; 2] = ["schedIdle", "coreExpeller"];

/// `{"enable": bool, "groupIdentity": -1..2}` (from a class or the pod annotation).
pub fn parse_cpu_qos_setting(value: &Value, path: &str) -> Result<CpuQosSetting, FieldError> {
    let mut out = CpuQosSetting::default();
    for (key, v) in json_object(value, path)? {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "enable" => out.enable = parse_enable(v, &field)?,
            "groupIdentity" if !v.is_null() => {
                out.group_identity = Some(parse_int_in_range(v, &field, -1, 2)?)
            }
            "groupIdentity" => {}
            k if IGNORED_CPU_QOS_KEYS.contains(&k) => {}
            _ => {
                return Err(FieldError::new(
                    field,
                    "unknown field (allowed: enable, groupIdentity)",
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cpu_qos_settings() {
        assert_eq!(
            parse_cpu_qos_setting(
                &json!({"enable": true, "groupIdentity": -1, "schedIdle": 0}),
                "c"
            )
            .expect("ok"),
            CpuQosSetting {
                enable: Some(true),
                group_identity: Some(-1)
            }
        );
        for (bad, msg) in [
            (
                json!({"groupIdentity": 3}),
                "c.groupIdentity: 3 is out of range (allowed -1..2)",
            ),
            (
                json!({"groupIdentity": "2"}),
                "c.groupIdentity: \"2\" is not an integer (allowed -1..2)",
            ),
            (json!({"enable": 1}), "c.enable: 1 is not true or false"),
            (
                json!({"bvt": 1}),
                "c.bvt: unknown field (allowed: enable, groupIdentity)",
            ),
            (json!([]), "c: [] is not a JSON object"),
        ] {
            assert_eq!(
                parse_cpu_qos_setting(&bad, "c")
                    .expect_err("bad")
                    .to_string(),
                msg
            );
        }
    }
}
