//! Reading manifests as a user would `kubectl apply` them: YAML or JSON, multi-document, `List`
//! objects expanded; and turning ConfigMap manifests into the policy configuration.

use std::collections::BTreeMap;

use koord_api::keys::{CLUSTER_CONFIGMAP_KEY, NAMESPACE_CONFIGMAP_KEY};
use serde::Deserialize;
use serde_json::Value;

use crate::policy::{ClusterQosConfig, FieldError, NamespaceQosConfig, ParseOutcome};

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("document {index}: not valid YAML or JSON: {source}")]
    Syntax {
        index: usize,
        source: serde_yaml::Error,
    },
    #[error("no ConfigMap with data.{key} found")]
    NoConfigMap { key: &'static str },
    #[error("ConfigMap {name}: {source}")]
    Config { name: String, source: FieldError },
}

/// Every object in a YAML/JSON stream, `List` items expanded, empty documents skipped.
pub fn read_objects(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            Value::deserialize(doc).map_err(|source| ManifestError::Syntax { index, source })?;
        match value {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = o.get("items") {
                    out.extend(items.iter().cloned());
                }
            }
            v => out.push(v),
        }
    }
    Ok(out)
}

pub fn kind(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The `data` of the first ConfigMap carrying `key`.
fn configmap_data<'v>(
    objects: &'v [Value],
    key: &'static str,
) -> Result<(&'v str, &'v str), ManifestError> {
    objects
        .iter()
        .filter(|o| kind(o) == "ConfigMap")
        .find_map(|o| Some((name(o), o.get("data")?.get(key)?.as_str()?)))
        .ok_or(ManifestError::NoConfigMap { key })
}

/// Parses the cluster ConfigMap (`ack-slo-config`) from a manifest stream.
pub fn cluster_config_from_manifests(
    text: &str,
) -> Result<ParseOutcome<ClusterQosConfig>, ManifestError> {
    let objects = read_objects(text)?;
    let (name, data) = configmap_data(&objects, CLUSTER_CONFIGMAP_KEY)?;
    ClusterQosConfig::parse(data).map_err(|source| ManifestError::Config {
        name: name.to_owned(),
        source,
    })
}

/// Parses the namespace ConfigMap (`ack-slo-pod-config`) from a manifest stream.
pub fn namespace_config_from_manifests(
    text: &str,
) -> Result<ParseOutcome<NamespaceQosConfig>, ManifestError> {
    let objects = read_objects(text)?;
    let (name, data) = configmap_data(&objects, NAMESPACE_CONFIGMAP_KEY)?;
    NamespaceQosConfig::parse(data).map_err(|source| ManifestError::Config {
        name: name.to_owned(),
        source,
    })
}

/// ConfigMap `data` as the watch sees it; a missing key means "use the defaults".
pub fn cluster_config_from_data(
    data: &BTreeMap<String, String>,
) -> Result<ParseOutcome<ClusterQosConfig>, FieldError> {
    match data.get(CLUSTER_CONFIGMAP_KEY) {
        Some(text) => ClusterQosConfig::parse(text),
        None => Ok(ParseOutcome {
            config: ClusterQosConfig::default(),
            notes: vec![format!("no {CLUSTER_CONFIGMAP_KEY} key: defaults")],
        }),
    }
}

/// ConfigMap `data` as the watch sees it; a missing key means "no namespace lists".
pub fn namespace_config_from_data(
    data: &BTreeMap<String, String>,
) -> Result<ParseOutcome<NamespaceQosConfig>, FieldError> {
    match data.get(NAMESPACE_CONFIGMAP_KEY) {
        Some(text) => NamespaceQosConfig::parse(text),
        None => Ok(ParseOutcome {
            config: NamespaceQosConfig::default(),
            notes: vec![format!("no {NAMESPACE_CONFIGMAP_KEY} key: defaults")],
        }),
    }
}
