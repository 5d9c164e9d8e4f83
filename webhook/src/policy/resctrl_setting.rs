//! `resctrlQOS` (L3 cache ways, memory bandwidth) as the cluster ConfigMap classes state it,
//! and Koordinator's recommended partition per class (docs/contract.md §2, CPU QoS and
//! resctrl).

use koord_api::QosClass;
use serde_json::Value;

use super::fields::{FieldError, json_object, parse_enable, parse_int_in_range};

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
    check_slice(start, end, path)
}

fn check_slice(start: i64, end: i64, path: &str) -> Result<(), FieldError> {
    if start >= end {
        return Err(FieldError::new(
            format!("{path}.catRangeEndPercent"),
            format!("{end} must be above catRangeStartPercent {start} (an empty cache slice)"),
        ));
    }
    Ok(())
}

/// `{"enable": bool, "catRangeStartPercent": 0..100, "catRangeEndPercent": 0..100, "mbaPercent": 1..100}`.
pub fn parse_resctrl_setting(value: &Value, path: &str) -> Result<ResctrlSetting, FieldError> {
    let mut out = ResctrlSetting::default();
    for (key, v) in json_object(value, path)? {
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
    if let (Some(start), Some(end)) = (out.cat_range_start_percent, out.cat_range_end_percent) {
        check_slice(start, end, path)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
