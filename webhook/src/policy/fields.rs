//! Field-level parsing shared by the pod annotations and the ConfigMaps, with errors that
//! name the field and the allowed range.

use std::fmt;

use koord_api::{LocalityPolicy, MemoryQosParams};
use serde_json::{Map, Value};

/// A bad value, named by its path (`koordinator.sh/memoryQOS.minLimitPercent`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
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

/// `true`, `false` or `null` (not stated).
pub fn parse_enable(value: &Value, field: &str) -> Result<Option<bool>, FieldError> {
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(FieldError::new(
            field,
            format!("{other} is not true or false"),
        )),
    }
}

/// `value` as a JSON object, or an error naming `path`.
pub fn json_object<'v>(value: &'v Value, path: &str) -> Result<&'v Map<String, Value>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| FieldError::new(path, format!("{value} is not a JSON object")))
}

/// Parameters set explicitly by one source, in [`MemoryQosParams::SPECS`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParamOverrides(pub [Option<i64>; 9]);

impl ParamOverrides {
    /// Applies the set values on top of `base`; returns which indices were set.
    pub fn apply_to(&self, base: &mut MemoryQosParams) -> [bool; 9] {
        let mut set = [false; 9];
        for (i, v) in self.0.iter().enumerate() {
            if let (Some(v), Some(slot)) = (v, base.slot_mut(i)) {
                *slot = *v;
                set[i] = true;
            }
        }
        set
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// Keys Koordinator defines on `MemoryQOS` that this product accepts and ignores (page cache
/// limits are Anolis cgroup v2 only and not part of the contract yet).
const IGNORED_MEMORY_QOS_KEYS: [&str; 4] = [
    "pageCacheEnable",
    "pageCacheLimitPercent",
    "pageCacheLimitSize",
    "pageCacheReclaimSync",
];

/// Reads the nine parameters from a JSON object. `extra_keys` are the other keys the caller
/// handles (`policy`, `enable`); any other key is an error, so a typo never passes silently.
pub fn parse_param_overrides(
    obj: &Map<String, Value>,
    path: &str,
    extra_keys: &[&str],
) -> Result<ParamOverrides, FieldError> {
    let mut out = ParamOverrides::default();
    for (key, value) in obj {
        if let Some(i) = MemoryQosParams::SPECS.iter().position(|s| s.name == key) {
            if value.is_null() {
                continue;
            }
            let spec = MemoryQosParams::SPECS[i];
            let field = format!("{path}.{key}");
            out.0[i] = Some(parse_int_in_range(value, &field, spec.min, spec.max)?);
        } else if !extra_keys.contains(&key.as_str())
            && !IGNORED_MEMORY_QOS_KEYS.contains(&key.as_str())
        {
            let allowed: Vec<&str> = extra_keys
                .iter()
                .copied()
                .chain(MemoryQosParams::SPECS.iter().map(|s| s.name))
                .collect();
            return Err(FieldError::new(
                format!("{path}.{key}"),
                format!("unknown field (allowed: {})", allowed.join(", ")),
            ));
        }
    }
    Ok(out)
}

/// Case-insensitive policy name lookup: returns the index into `allowed`.
pub fn parse_policy_name(
    value: &Value,
    field: &str,
    allowed: &[&str],
) -> Result<usize, FieldError> {
    let names = allowed.join("|");
    let s = value.as_str().ok_or_else(|| {
        FieldError::new(field, format!("{value} is not a string (allowed {names})"))
    })?;
    allowed
        .iter()
        .position(|a| a.eq_ignore_ascii_case(s.trim()))
        .ok_or_else(|| {
            FieldError::new(
                field,
                format!("unknown policy {s:?} (allowed {names}, case-insensitive)"),
            )
        })
}

/// Memory locality as one source states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalitySetting {
    pub policy: LocalityPolicy,
    pub migrate_interval_minutes: Option<u32>,
}

/// Upper bound of `migrateIntervalMinutes`: one week. Longer intervals are almost certainly a
/// unit mistake (seconds for minutes).
pub const MAX_MIGRATE_INTERVAL_MINUTES: u32 = 10_080;

/// `{"policy": "bestEffort"|"none", "migrateIntervalMinutes": N}`; policy is required.
pub fn parse_locality_setting(value: &Value, path: &str) -> Result<LocalitySetting, FieldError> {
    let obj = value.as_object().ok_or_else(|| {
        FieldError::new(
            path,
            format!("{value} is not a JSON object like {{\"policy\": \"bestEffort\"}}"),
        )
    })?;
    let mut policy = None;
    let mut interval = None;
    for (key, v) in obj {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "policy" => {
                let i = parse_policy_name(v, &field, &["bestEffort", "none"])?;
                policy = Some(if i == 0 {
                    LocalityPolicy::BestEffort
                } else {
                    LocalityPolicy::None
                });
            }
            "migrateIntervalMinutes" => {
                if v.is_null() {
                    continue;
                }
                let n = v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n <= MAX_MIGRATE_INTERVAL_MINUTES)
                    .ok_or_else(|| {
                        FieldError::new(
                            &field,
                            format!(
                                "{v} is out of range (allowed 0..{MAX_MIGRATE_INTERVAL_MINUTES})"
                            ),
                        )
                    })?;
                interval = Some(n);
            }
            _ => {
                return Err(FieldError::new(
                    field,
                    "unknown field (allowed: policy, migrateIntervalMinutes)",
                ));
            }
        }
    }
    let policy = policy.ok_or_else(|| {
        FieldError::new(
            format!("{path}.policy"),
            "is required (allowed bestEffort|none)",
        )
    })?;
    Ok(LocalitySetting {
        policy,
        migrate_interval_minutes: interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn params_in_and_out_of_range() {
        let ok = parse_param_overrides(
            &obj(json!({"minLimitPercent": 100, "wmarkMinAdj": -25, "policy": "auto"})),
            "a",
            &["policy"],
        )
        .expect("valid");
        assert_eq!(ok.0[0], Some(100));
        assert_eq!(ok.0[4], Some(-25));
        let cases = [
            (
                json!({"minLimitPercent": 101}),
                "a.minLimitPercent: 101 is out of range (allowed 0..100)",
            ),
            (
                json!({"lowLimitPercent": -1}),
                "a.lowLimitPercent: -1 is out of range (allowed 0..100)",
            ),
            (
                json!({"throttlingPercent": 1000}),
                "a.throttlingPercent: 1000 is out of range (allowed 0..100)",
            ),
            (
                json!({"wmarkRatio": 101}),
                "a.wmarkRatio: 101 is out of range (allowed 0..100)",
            ),
            (
                json!({"wmarkMinAdj": 51}),
                "a.wmarkMinAdj: 51 is out of range (allowed -25..50)",
            ),
            (
                json!({"wmarkScalePermill": 0}),
                "a.wmarkScalePermill: 0 is out of range (allowed 1..1000)",
            ),
            (
                json!({"priority": 13}),
                "a.priority: 13 is out of range (allowed 0..12)",
            ),
            (
                json!({"priorityEnable": 2}),
                "a.priorityEnable: 2 is out of range (allowed 0..1)",
            ),
            (
                json!({"oomKillGroup": -1}),
                "a.oomKillGroup: -1 is out of range (allowed 0..1)",
            ),
            (
                json!({"minLimitPercent": "50"}),
                "a.minLimitPercent: \"50\" is not an integer (allowed 0..100)",
            ),
            (
                json!({"minLimitPercent": 1.5}),
                "a.minLimitPercent: 1.5 is not an integer (allowed 0..100)",
            ),
        ];
        for (input, msg) in cases {
            let err =
                parse_param_overrides(&obj(input.clone()), "a", &[]).expect_err(&input.to_string());
            assert_eq!(err.to_string(), msg);
        }
        let unknown = parse_param_overrides(&obj(json!({"minLimitPercnt": 1})), "a", &["policy"])
            .expect_err("typo");
        assert!(
            unknown
                .to_string()
                .starts_with("a.minLimitPercnt: unknown field (allowed: policy, minLimitPercent"),
            "{unknown}"
        );
        assert!(parse_param_overrides(&obj(json!({"pageCacheEnable": true})), "a", &[]).is_ok());
    }

    #[test]
    fn locality_settings() {
        let s = parse_locality_setting(
            &json!({"policy": "BESTEFFORT", "migrateIntervalMinutes": 10}),
            "l",
        )
        .expect("ok");
        assert_eq!(
            s,
            LocalitySetting {
                policy: LocalityPolicy::BestEffort,
                migrate_interval_minutes: Some(10)
            }
        );
        let s = parse_locality_setting(&json!({"policy": "None"}), "l").expect("ok");
        assert_eq!(s.policy, LocalityPolicy::None);
        for (bad, msg) in [
            (
                json!({"policy": "always"}),
                "l.policy: unknown policy \"always\" (allowed bestEffort|none, case-insensitive)",
            ),
            (
                json!({"migrateIntervalMinutes": 5}),
                "l.policy: is required (allowed bestEffort|none)",
            ),
            (
                json!({"policy": "none", "migrateIntervalMinutes": -1}),
                "l.migrateIntervalMinutes: -1 is out of range (allowed 0..10080)",
            ),
            (
                json!({"policy": "none", "x": 1}),
                "l.x: unknown field (allowed: policy, migrateIntervalMinutes)",
            ),
            (
                json!("bestEffort"),
                "l: \"bestEffort\" is not a JSON object like {\"policy\": \"bestEffort\"}",
            ),
        ] {
            assert_eq!(
                parse_locality_setting(&bad, "l")
                    .expect_err("bad")
                    .to_string(),
                msg
            );
        }
    }
}
