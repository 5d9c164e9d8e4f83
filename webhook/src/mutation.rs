//! The two renderings of a change list ([`crate::resolve::changes`]): applied to a manifest
//! (the `resolve` command) and as an RFC 6902 JSON patch (the admission response). Nothing here
//! decides anything.

use serde_json::{Map, Value};

use crate::resolve::changes::{Change, OwnedResources};
use crate::resolve::{PodInput, Resolution};
use koord_api::ResolvedQos;
use koord_api::json_write;
use koord_api::keys::{ANNOTATION_EXTENDED_RESOURCE_SPEC, ANNOTATION_RESOLVED_QOS, LABEL_QOS_CLASS};

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

/// Applies the resolution's changes to a pod manifest (as `kubectl` would after the patch).
pub fn apply_changes(pod: &mut Value, resolution: &Resolution) {
    for change in &resolution.changes {
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
            Change::SetResolvedQos => {
                let meta = object_at(pod, "metadata");
                object_entry(meta, "annotations").insert(
                    ANNOTATION_RESOLVED_QOS.to_owned(),
                    Value::String(resolution.annotation()),
                );
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

/// The RFC 6902 patch turning `pod` into the pod with the resolution's changes applied, as
/// JSON bytes. Missing `labels` / `annotations` maps are created first; `add` on an existing
/// member replaces it.
pub fn json_patch(pod: &PodInput<'_>, resolution: &Resolution) -> Vec<u8> {
    let mut out = Vec::with_capacity(patch_capacity(&resolution.changes));
    write_json_patch(&mut out, pod, resolution);
    out
}

/// A capacity that holds the patch of `changes` without growing in the common cases.
pub fn patch_capacity(changes: &[Change]) -> usize {
    changes
        .iter()
        .map(|c| match c {
            // The value is escaped once more: a quote becomes two bytes.
            Change::SetLabel { value, .. } | Change::SetAnnotation { value, .. } => {
                value.len() + value.len() / 4 + 128
            }
            // A two-container pod's resolved-qos, escaped, is about 1 KB.
            Change::SetResolvedQos => 1536,
            Change::SetResources { .. } | Change::SetOverhead(_) => 256,
        })
        .sum::<usize>()
        + 128
}

/// Appends the patch (see [`json_patch`]) to `out` without building a `serde_json::Value`:
/// the members of each operation in the order serde_json writes them (`op`, `path`,
/// `value`), strings escaped as serde_json escapes them, so the bytes are the same as
/// `serde_json::to_vec` of the equivalent `Value`. Returns the number of operations.
///
/// The resolved-qos text is written straight from the resolution, already escaped, instead of
/// rendering the text and escaping it afterwards (the largest string of every patch).
pub fn write_json_patch(out: &mut Vec<u8>, pod: &PodInput<'_>, resolution: &Resolution) -> usize {
    let mut ops = PatchWriter { out, ops: 0 };
    let mut has_labels = pod.metadata.labels.is_some();
    let mut has_annotations = pod.metadata.annotations.is_some();
    ops.out.push(b'[');
    for change in &resolution.changes {
        match change {
            Change::SetLabel { key, value } => {
                if !has_labels {
                    ops.add_empty_object("/metadata/labels");
                    has_labels = true;
                }
                ops.add_string("/metadata/labels/", key, value);
            }
            Change::SetAnnotation { key, value } => {
                if !has_annotations {
                    ops.add_empty_object("/metadata/annotations");
                    has_annotations = true;
                }
                ops.add_string("/metadata/annotations/", key, value);
            }
            Change::SetResolvedQos => {
                if !has_annotations {
                    ops.add_empty_object("/metadata/annotations");
                    has_annotations = true;
                }
                ops.add_resolved_qos(&resolution.resolved);
            }
            Change::SetResources {
                list,
                index,
                resources,
            } => {
                let base = format!("/spec/{}/{index}/resources", list.field());
                if let Some(r) = &resources.requests {
                    ops.add_resources(&format!("{base}/requests"), r);
                }
                if let Some(l) = &resources.limits {
                    ops.add_resources(&format!("{base}/limits"), l);
                }
            }
            Change::SetOverhead(o) => ops.add_resources("/spec/overhead", o),
        }
    }
    ops.out.push(b']');
    ops.ops
}

/// The pointer tokens of the keys the engine writes, spelled out (a test holds them to
/// [`escape_pointer_token`]): every admission writes two of them.
fn known_pointer_token(key: &str) -> Option<&'static str> {
    match key {
        LABEL_QOS_CLASS => Some("koordinator.sh~1qosClass"),
        ANNOTATION_RESOLVED_QOS => Some("koordinator.sh~1resolved-qos"),
        ANNOTATION_EXTENDED_RESOURCE_SPEC => Some("node.koordinator.sh~1extended-resource-spec"),
        _ => None,
    }
}

/// [`escape_pointer_token`] of `key`, JSON-escaped, without the intermediate strings.
fn escaped_pointer_token(out: &mut Vec<u8>, key: &str) {
    if let Some(token) = known_pointer_token(key) {
        out.extend_from_slice(token.as_bytes());
        return;
    }
    let mut plain = 0;
    for (i, &byte) in key.as_bytes().iter().enumerate() {
        let pointer_escape: &[u8] = match byte {
            b'~' => b"~0",
            b'/' => b"~1",
            b'"' | b'\\' | 0..0x20 => b"",
            _ => continue,
        };
        out.extend_from_slice(&key.as_bytes()[plain..i]);
        if pointer_escape.is_empty() {
            json_write::escaped(out, &key[i..=i]);
        } else {
            out.extend_from_slice(pointer_escape);
        }
        plain = i + 1;
    }
    out.extend_from_slice(&key.as_bytes()[plain..]);
}

/// Writes `add` operations, comma-separated.
struct PatchWriter<'o> {
    out: &'o mut Vec<u8>,
    ops: usize,
}

impl PatchWriter<'_> {
    /// `{"op":"add","path":` with the separator before every operation but the first.
    fn begin(&mut self) {
        if self.ops > 0 {
            self.out.push(b',');
        }
        self.ops += 1;
        self.out.extend_from_slice(br#"{"op":"add","path":"#);
    }

    fn add_empty_object(&mut self, path: &str) {
        self.begin();
        json_write::string(self.out, path);
        self.out.extend_from_slice(br#","value":{}}"#);
    }

    /// `path` = `prefix` + the escaped pointer token of `key`; a string value.
    fn add_string(&mut self, prefix: &str, key: &str, value: &str) {
        self.begin();
        self.out.push(b'"');
        json_write::escaped(self.out, prefix);
        escaped_pointer_token(self.out, key);
        self.out.extend_from_slice(br#"","value":"#);
        json_write::string(self.out, value);
        self.out.push(b'}');
    }

    /// The resolved-qos annotation, its text written escaped straight from the resolution.
    fn add_resolved_qos(&mut self, resolved: &ResolvedQos) {
        self.begin();
        self.out.push(b'"');
        json_write::escaped(self.out, "/metadata/annotations/");
        escaped_pointer_token(self.out, ANNOTATION_RESOLVED_QOS);
        self.out.extend_from_slice(br#"","value":""#);
        resolved.write_annotation_in_string(self.out);
        self.out.extend_from_slice(br#""}"#);
    }

    /// A resource list as an object in key order (a `BTreeMap`, as serde_json's map).
    fn add_resources(&mut self, path: &str, resources: &OwnedResources) {
        self.begin();
        json_write::string(self.out, path);
        self.out.extend_from_slice(br#","value":{"#);
        for (i, (name, quantity)) in resources.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            json_write::string(self.out, name);
            self.out.push(b':');
            json_write::string(self.out, quantity);
        }
        self.out.extend_from_slice(b"}}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_tokens_are_escaped_then_json_escaped() {
        for key in [
            LABEL_QOS_CLASS,
            ANNOTATION_RESOLVED_QOS,
            ANNOTATION_EXTENDED_RESOURCE_SPEC,
            "plain",
            "a/b~c",
            "~/~/",
            "q\"uote\\back\u{1}",
            "",
        ] {
            let mut direct = Vec::new();
            escaped_pointer_token(&mut direct, key);
            let want = serde_json::to_string(&escape_pointer_token(key)).expect("json");
            assert_eq!(
                String::from_utf8(direct).expect("utf-8"),
                want[1..want.len() - 1],
                "{key:?}"
            );
        }
    }
}
