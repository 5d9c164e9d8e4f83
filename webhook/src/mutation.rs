//! The two renderings of a change list ([`crate::resolve::changes`]): applied to a manifest
//! (the `resolve` command) and as an RFC 6902 JSON patch (the admission response). Nothing here
//! decides anything.

use serde_json::{Map, Value, json};

use crate::resolve::PodInput;
use crate::resolve::changes::{Change, OwnedResources};

fn resources_value(r: &OwnedResources) -> Value {
    Value::Object(
        r.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// `value` as an object, replacing anything else (a manifest may carry `labels: null`).
fn as_object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// The object under `key` of `parent`, both created when missing.
fn object_at<'v>(parent: &'v mut Value, key: &str) -> &'v mut Map<String, Value> {
    object_entry(as_object(parent), key)
}

/// Applies the changes to a pod manifest (as `kubectl` would after the patch).
pub fn apply_changes(pod: &mut Value, changes: &[Change]) {
    for change in changes {
        match change {
            Change::SetLabel { key, value } => {
                let meta = object_at(pod, "metadata");
                object_entry(meta, "labels")
                    .insert((*key).to_owned(), Value::String(value.clone()));
            }
            Change::SetAnnotation { key, value } => {
                let meta = object_at(pod, "metadata");
                object_entry(meta, "annotations")
                    .insert((*key).to_owned(), Value::String(value.clone()));
            }
            Change::SetResources {
                list,
                index,
                resources,
            } => {
                let Some(container) = pod.pointer_mut(&format!("/spec/{}/{index}", list.field()))
                else {
                    continue;
                };
                let res = object_at(container, "resources");
                if let Some(r) = &resources.requests {
                    res.insert("requests".to_owned(), resources_value(r));
                }
                if let Some(l) = &resources.limits {
                    res.insert("limits".to_owned(), resources_value(l));
                }
            }
            Change::SetOverhead(o) => {
                object_at(pod, "spec").insert("overhead".to_owned(), resources_value(o));
            }
        }
    }
}

fn object_entry<'m>(map: &'m mut Map<String, Value>, key: &str) -> &'m mut Map<String, Value> {
    as_object(map.entry(key.to_owned()).or_insert(Value::Null))
}

/// Escapes one JSON pointer token (RFC 6901): `~` -> `~0`, `/` -> `~1`.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The RFC 6902 patch turning `pod` into the pod with `changes` applied. Missing `labels` /
/// `annotations` maps are created first; `add` on an existing member replaces it.
pub fn json_patch(pod: &PodInput<'_>, changes: &[Change]) -> Value {
    let mut ops = Vec::with_capacity(changes.len() + 2);
    let mut has_labels = pod.metadata.labels.is_some();
    let mut has_annotations = pod.metadata.annotations.is_some();
    for change in changes {
        match change {
            Change::SetLabel { key, value } => {
                if !has_labels {
                    ops.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
                    has_labels = true;
                }
                ops.push(json!({"op": "add", "path": format!("/metadata/labels/{}", escape_pointer_token(key)), "value": value}));
            }
            Change::SetAnnotation { key, value } => {
                if !has_annotations {
                    ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
                    has_annotations = true;
                }
                ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", escape_pointer_token(key)), "value": value}));
            }
            Change::SetResources {
                list,
                index,
                resources,
            } => {
                let base = format!("/spec/{}/{index}/resources", list.field());
                if let Some(r) = &resources.requests {
                    ops.push(json!({"op": "add", "path": format!("{base}/requests"), "value": resources_value(r)}));
                }
                if let Some(l) = &resources.limits {
                    ops.push(json!({"op": "add", "path": format!("{base}/limits"), "value": resources_value(l)}));
                }
            }
            Change::SetOverhead(o) => ops
                .push(json!({"op": "add", "path": "/spec/overhead", "value": resources_value(o)})),
        }
    }
    Value::Array(ops)
}
