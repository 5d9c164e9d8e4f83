//! The note of the `MemoryQOSReresolved` Event: what changed for the pod, old -> new, in the
//! words `kubectl describe pod` readers know from the ConfigMaps (pure).
//!
//! `memoryQOS enabled=true (cluster-config) -> enabled=false (cluster-config); also
//! memoryQOS.params.wmarkRatio 95->0, ...`. The per-container knob values are left out: they
//! follow from the parameters and the pod's resources, and the annotation shows them.

use std::fmt::Write as _;

use serde_json::Value;

/// The Event reason.
pub const REASON_RERESOLVED: &str = "MemoryQOSReresolved";

/// Leaves listed after the headline; the rest are counted.
const MAX_LISTED: usize = 8;
/// The API server accepts notes up to 1 KiB.
const MAX_NOTE_BYTES: usize = 1024;

/// Paths whose leaves are derived numbers (or already in the headline).
const SKIPPED: [&str; 6] = [
    "memoryQOS.containers",
    "proactiveReclaim.containers",
    "memoryQOS.pod",
    "memoryQOS.enabled",
    "memoryQOS.source",
    "batch",
];

/// `enabled=true (cluster-config)`, from a resolved-qos annotation.
fn memory_qos_state(annotation: &Value) -> String {
    let m = &annotation["memoryQOS"];
    match (m["enabled"].as_bool(), m["source"].as_str()) {
        (Some(enabled), Some(source)) => format!("enabled={enabled} ({source})"),
        _ => "unreadable".to_owned(),
    }
}

fn leaf_text(v: Option<&Value>) -> String {
    match v {
        None => "absent".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(_)) => "{..}".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// The leaf paths where `old` and `new` differ, in key order, with both values.
fn changed_leaves(old: &Value, new: &Value, prefix: &str, out: &mut Vec<String>) {
    if SKIPPED.contains(&prefix) {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => changed_leaves(x, y, &path, out),
                    (x, y) if !SKIPPED.contains(&path.as_str()) => {
                        out.push(format!("{path} {}->{}", leaf_text(x), leaf_text(y)));
                    }
                    _ => {}
                }
            }
        }
        (a, b) if a != b => out.push(format!(
            "{prefix} {}->{}",
            leaf_text(Some(a)),
            leaf_text(Some(b))
        )),
        _ => {}
    }
}

/// The Event note for a pod whose resolved-qos goes from `old` (absent: the pod was admitted
/// without the webhook) to `new`.
pub fn reresolved_message(old: Option<&str>, new: &str) -> String {
    let new_value: Value = serde_json::from_str(new).unwrap_or(Value::Null);
    let mut msg = String::new();
    match old {
        None => {
            let _ = write!(
                msg,
                "memoryQOS none -> {}; the pod had no resolved-qos (admitted while the webhook was unavailable)",
                memory_qos_state(&new_value)
            );
        }
        Some(old) => {
            let old_value: Value = serde_json::from_str(old).unwrap_or(Value::Null);
            let _ = write!(
                msg,
                "memoryQOS {} -> {}",
                memory_qos_state(&old_value),
                memory_qos_state(&new_value)
            );
            let mut leaves = Vec::new();
            if old_value.is_object() {
                changed_leaves(&old_value, &new_value, "", &mut leaves);
            } else {
                leaves.push("resolved-qos was not valid JSON".to_owned());
            }
            if !leaves.is_empty() {
                let listed = leaves.len().min(MAX_LISTED);
                let _ = write!(msg, "; also {}", leaves[..listed].join(", "));
                if leaves.len() > listed {
                    let _ = write!(msg, " (+{} more)", leaves.len() - listed);
                }
            }
        }
    }
    truncate(msg)
}

fn truncate(mut msg: String) -> String {
    if msg.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES - 3;
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        msg.truncate(end);
        msg.push_str("...");
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotation(enabled: bool, source: &str, wmark: i64) -> String {
        serde_json::json!({
            "version": 1, "qosClass": "LS", "qosClassSource": "label",
            "memoryQOS": {"enabled": enabled, "policy": "default", "source": source,
                "params": {"wmarkRatio": wmark, "wmarkMinAdj": 0},
                "pod": {"memory.min": 0},
                "containers": {"app": {"memory.wmark_ratio": wmark}}}
        })
        .to_string()
    }

    #[test]
    fn messages() {
        let on = annotation(true, "cluster-config", 95);
        let off = annotation(false, "cluster-config", 0);
        let ns_off = annotation(false, "namespace-config", 0);
        let mut forged: Value = serde_json::from_str(&on).expect("json");
        forged["qosClass"] = "LSE".into();
        forged["hand"] = "edited".into();
        let forged = forged.to_string();
        for (old, new, want) in [
            (
                Some(on.as_str()),
                off.as_str(),
                "memoryQOS enabled=true (cluster-config) -> enabled=false (cluster-config); also memoryQOS.params.wmarkRatio 95->0",
            ),
            (
                Some(off.as_str()),
                ns_off.as_str(),
                "memoryQOS enabled=false (cluster-config) -> enabled=false (namespace-config)",
            ),
            (
                None,
                on.as_str(),
                "memoryQOS none -> enabled=true (cluster-config); the pod had no resolved-qos (admitted while the webhook was unavailable)",
            ),
            (
                Some("{not json"),
                on.as_str(),
                "memoryQOS unreadable -> enabled=true (cluster-config); also resolved-qos was not valid JSON",
            ),
            (
                Some(forged.as_str()),
                on.as_str(),
                "memoryQOS enabled=true (cluster-config) -> enabled=true (cluster-config); also hand edited->absent, qosClass LSE->LS",
            ),
        ] {
            assert_eq!(reresolved_message(old, new), want);
        }
    }

    #[test]
    fn proactive_reclaim_changes_are_named_without_the_floors() {
        let on = annotation(true, "cluster-config", 95);
        let with = |enabled: bool, step: i64, floor: i64| {
            let mut v: Value = serde_json::from_str(&on).expect("json");
            v["proactiveReclaim"] = serde_json::json!({"enabled": enabled,
                "params": {"stepPermill": step}, "source": "cluster-config",
                "containers": {"app": {"floorBytes": floor}}});
            v.to_string()
        };
        assert_eq!(
            reresolved_message(Some(&on), &with(true, 10, 0)),
            "memoryQOS enabled=true (cluster-config) -> enabled=true (cluster-config); also proactiveReclaim absent->{..}"
        );
        assert_eq!(
            reresolved_message(Some(&with(true, 10, 0)), &with(false, 20, 100)),
            "memoryQOS enabled=true (cluster-config) -> enabled=true (cluster-config); also proactiveReclaim.enabled true->false, proactiveReclaim.params.stepPermill 10->20"
        );
    }

    #[test]
    fn long_lists_are_counted_and_notes_stay_under_the_limit() {
        let old: Value = serde_json::json!({"memoryQOS": {"enabled": true, "source": "default",
            "params": (0..20).map(|i| (format!("p{i:02}"), Value::from(i))).collect::<serde_json::Map<_, _>>()}});
        let new: Value = serde_json::json!({"memoryQOS": {"enabled": true, "source": "default",
            "params": (0..20).map(|i| (format!("p{i:02}"), Value::from(i + 1))).collect::<serde_json::Map<_, _>>()}});
        let msg = reresolved_message(Some(&old.to_string()), &new.to_string());
        assert!(
            msg.ends_with("memoryQOS.params.p07 7->8 (+12 more)"),
            "{msg}"
        );
        let huge = format!("{{\"x\":\"{}\"}}", "é".repeat(2000));
        let msg = reresolved_message(Some(&huge), &new.to_string());
        assert!(
            msg.len() <= MAX_NOTE_BYTES && msg.ends_with("..."),
            "{}",
            msg.len()
        );
    }
}
