//! `proactiveReclaim` as the cluster ConfigMap classes and the `koordinator.sh/proactiveReclaim`
//! pod annotation state it (docs/contract.md §2, Proactive reclaim).

use koord_api::ProactiveReclaimParams;
use serde_json::Value;

use super::fields::{FieldError, json_object, parse_enable, parse_int_in_range};

/// Proactive reclaim parameters set explicitly by one source, in
/// [`ProactiveReclaimParams::SPECS`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProactiveReclaimOverrides(pub [Option<i64>; 4]);

impl ProactiveReclaimOverrides {
    /// Applies the set values on top of `base`; returns which indices were set.
    pub fn apply_to(&self, base: &mut ProactiveReclaimParams) -> [bool; 4] {
        let mut set = [false; 4];
        for (i, v) in self.0.iter().enumerate() {
            if let (Some(v), Some(slot)) = (v, base.slot_mut(i)) {
                *slot = *v;
                set[i] = true;
            }
        }
        set
    }
}

/// Proactive reclaim as one source states it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProactiveReclaimSetting {
    /// `None`: the source does not say (a lower source decides).
    pub enable: Option<bool>,
    pub params: ProactiveReclaimOverrides,
}

/// The keys of the object, for the unknown-field message.
const ALLOWED: &str = "enable, intervalSeconds, stallTargetMicros, stepPermill, floorPercent";

/// `{"enable": bool, "intervalSeconds": 1..600, "stallTargetMicros": 100..1000000,
/// "stepPermill": 1..100, "floorPercent": 0..100}`; every key optional, `null` = not stated,
/// any other key an error so a typo never passes silently.
pub fn parse_proactive_reclaim_setting(
    value: &Value,
    path: &str,
) -> Result<ProactiveReclaimSetting, FieldError> {
    let mut out = ProactiveReclaimSetting::default();
    for (key, v) in json_object(value, path)? {
        let field = format!("{path}.{key}");
        if key == "enable" {
            out.enable = parse_enable(v, &field)?;
            continue;
        }
        let Some(i) = ProactiveReclaimParams::SPECS
            .iter()
            .position(|s| s.name == key)
        else {
            return Err(FieldError::new(
                field,
                format!("unknown field (allowed: {ALLOWED})"),
            ));
        };
        if v.is_null() {
            continue;
        }
        let spec = ProactiveReclaimParams::SPECS[i];
        out.params.0[i] = Some(parse_int_in_range(v, &field, spec.min, spec.max)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settings_and_overrides() {
        let s = parse_proactive_reclaim_setting(
            &json!({"enable": true, "stepPermill": 20, "floorPercent": null}),
            "p",
        )
        .expect("ok");
        assert_eq!(s.enable, Some(true));
        assert_eq!(
            s.params,
            ProactiveReclaimOverrides([None, None, Some(20), None])
        );
        let mut params = ProactiveReclaimParams::DEFAULT;
        assert_eq!(s.params.apply_to(&mut params), [false, false, true, false]);
        assert_eq!(params.step_permill, 20);
        assert_eq!(params.interval_seconds, 6);

        let empty = parse_proactive_reclaim_setting(&json!({}), "p").expect("ok");
        assert_eq!(empty, ProactiveReclaimSetting::default());
    }

    #[test]
    fn bad_values_name_the_field_and_range() {
        for (bad, msg) in [
            (
                json!({"intervalSeconds": 0}),
                "p.intervalSeconds: 0 is out of range (allowed 1..600)",
            ),
            (
                json!({"intervalSeconds": 601}),
                "p.intervalSeconds: 601 is out of range (allowed 1..600)",
            ),
            (
                json!({"stallTargetMicros": 99}),
                "p.stallTargetMicros: 99 is out of range (allowed 100..1000000)",
            ),
            (
                json!({"stepPermill": 101}),
                "p.stepPermill: 101 is out of range (allowed 1..100)",
            ),
            (
                json!({"floorPercent": -1}),
                "p.floorPercent: -1 is out of range (allowed 0..100)",
            ),
            (
                json!({"floorPercent": "50"}),
                "p.floorPercent: \"50\" is not an integer (allowed 0..100)",
            ),
            (
                json!({"stepPermill": 1.5}),
                "p.stepPermill: 1.5 is not an integer (allowed 1..100)",
            ),
            (
                json!({"enable": "yes"}),
                "p.enable: \"yes\" is not true or false",
            ),
            (
                json!({"floorPercnt": 5}),
                "p.floorPercnt: unknown field (allowed: enable, intervalSeconds, stallTargetMicros, stepPermill, floorPercent)",
            ),
            (json!(true), "p: true is not a JSON object"),
        ] {
            assert_eq!(
                parse_proactive_reclaim_setting(&bad, "p")
                    .expect_err("bad")
                    .to_string(),
                msg
            );
        }
    }
}
