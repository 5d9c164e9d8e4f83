//! `cpuQOS` (group identity) and `resctrlQOS` (L3 ways, memory bandwidth) settings, as the
//! cluster ConfigMap classes and the `koordinator.sh/cpuQOS` pod annotation state them.

use koord_api::QosClass;
use serde_json::{Map, Value};

use super::fields::FieldError;

/// Group identity as one source states it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuQosSetting {
    pub enable: Option<bool>,
    pub group_identity: Option<i64>,
}

/// Resctrl partition as the cluster ConfigMap states it for a class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResctrlSetting {
    pub enable: Option<bool>,
    pub cat_range_start_percent: Option<i64>,
    pub cat_range_end_percent: Option<i64>,
    pub mba_percent: Option<i64>,
}

/// Koordinator's recommended partition (start%, end%, mba%): BE gets the lowest 30% of the ways.
pub fn recommended_resctrl(class: QosClass) -> (i64, i64, i64) {
    match class {
        QosClass::Be => (0, 30, 100),
        _ => (0, 100, 100),
    }
}

/// The class's partition: its recommended values with the ConfigMap's on top.
pub fn effective_resctrl(class: QosClass, s: &ResctrlSetting) -> (i64, i64, i64) {
    let (start, end, mba) = recommended_resctrl(class);
    (
        s.cat_range_start_percent.unwrap_or(start),
        s.cat_range_end_percent.unwrap_or(end),
        s.mba_percent.unwrap_or(mba),
    )
}

/// Refuses a class partition whose cache slice would be empty once defaults fill the gaps.
pub fn check_resctrl_slice(
    class: QosClass,
    s: &ResctrlSetting,
    path: &str,
) -> Result<(), FieldError> {
    let (start, end, _) = effective_resctrl(class, s);
    if start >= end {
        return Err(FieldError::new(
            format!("{path}.catRangeEndPercent"),
            format!("{end} must be above catRangeStartPercent {start} (an empty cache slice)"),
        ));
    }
    Ok(())
}

/// An integer field in `min..=max`, with the field and range in the error.
pub fn parse_int_in_range(
    value: &Value,
    field: &str,
    min: i64,
    max: i64,
) -> Result<i64, FieldError> {
    let v = value.as_i64().ok_or_else(|| {
        FieldError::new(
            field,
            format!("{value} is not an integer (allowed {min}..{max})"),
        )
    })?;
    if !(min..=max).contains(&v) {
        return Err(FieldError::new(
            field,
            format!("{v} is out of range (allowed {min}..{max})"),
        ));
    }
    Ok(v)
}

fn parse_enable(value: &Value, field: &str) -> Result<Option<bool>, FieldError> {
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(FieldError::new(
            field,
            format!("{other} is not true or false"),
        )),
    }
}

fn object<'v>(value: &'v Value, path: &str) -> Result<&'v Map<String, Value>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| FieldError::new(path, format!("{value} is not a JSON object")))
}

/// Koordinator's CPU QoS keys that this product accepts and ignores.
const IGNORED_CPU_QOS_KEYS: [&str; 2] = ["schedIdle", "coreExpeller"];

/// `{"enable": bool, "groupIdentity": -1..2}` (from a class or the pod annotation).
pub fn parse_cpu_qos_setting(value: &Value, path: &str) -> Result<CpuQosSetting, FieldError> {
    let mut out = CpuQosSetting::default();
    for (key, v) in object(value, path)? {
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

/// `{"enable": bool, "catRangeStartPercent": 0..100, "catRangeEndPercent": 0..100, "mbaPercent": 1..100}`.
pub fn parse_resctrl_setting(value: &Value, path: &str) -> Result<ResctrlSetting, FieldError> {
    let mut out = ResctrlSetting::default();
    for (key, v) in object(value, path)? {
        let field = format!("{path}.{key}");
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "enable" => out.enable = parse_enable(v, &field)?,
            "catRangeStartPercent" => {
                out.cat_range_start_percent = Some(parse_int_in_range(v, &field, 0, 100)?)
            }
            "catRangeEndPercent" => {
                out.cat_range_end_percent = Some(parse_int_in_range(v, &field, 0, 100)?)
            }
            "mbaPercent" => out.mba_percent = Some(parse_int_in_range(v, &field, 1, 100)?),
            _ => {
                return Err(FieldError::new(
                    field,
                    "unknown field (allowed: enable, catRangeStartPercent, catRangeEndPercent, mbaPercent)",
                ));
            }
        }
    }
    if let (Some(start), Some(end)) = (out.cat_range_start_percent, out.cat_range_end_percent)
        && start >= end
    {
        return Err(FieldError::new(
            format!("{path}.catRangeEndPercent"),
            format!("{end} must be above catRangeStartPercent {start} (an empty cache slice)"),
        ));
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

    #[test]
    fn resctrl_settings() {
        let s = parse_resctrl_setting(&json!({"enable": true, "catRangeEndPercent": 30}), "r")
            .expect("ok");
        assert_eq!((s.enable, s.cat_range_end_percent), (Some(true), Some(30)));
        for (bad, msg) in [
            (
                json!({"catRangeStartPercent": 101}),
                "r.catRangeStartPercent: 101 is out of range (allowed 0..100)",
            ),
            (
                json!({"mbaPercent": 0}),
                "r.mbaPercent: 0 is out of range (allowed 1..100)",
            ),
            (
                json!({"catRangeStartPercent": 50, "catRangeEndPercent": 50}),
                "r.catRangeEndPercent: 50 must be above catRangeStartPercent 50 (an empty cache slice)",
            ),
        ] {
            assert_eq!(
                parse_resctrl_setting(&bad, "r")
                    .expect_err("bad")
                    .to_string(),
                msg
            );
        }
    }
}
