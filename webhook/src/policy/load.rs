//! Where a policy configuration comes from: ConfigMap manifests in files (the `resolve` command
//! and `serve --standalone`) or the `data` of a watched ConfigMap (the server in a cluster).
//! Both ConfigMaps go through the same two functions, [`from_manifests`] and [`from_data`].

use std::collections::BTreeMap;
use std::path::Path;

use koord_api::colocation::COLOCATION_KEY;
use koord_api::keys::{
    CLUSTER_CONFIGMAP_KEY, NAMESPACE_CONFIGMAP_KEY, NAMESPACE_CONFIGMAP_PROACTIVE_RECLAIM_KEY,
};

use super::cluster::{ClusterQosConfig, ParseOutcome};
use super::colocation::Colocation;
use super::config::PolicyConfig;
use super::fields::FieldError;
use super::namespace::NamespaceQosConfig;
use crate::manifest::{self, ManifestError, ReadError};

/// Why a ConfigMap manifest gave no policy. Each message starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoadError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{path}: {source}")]
    Manifest { path: String, source: ManifestError },
    #[error("{path}: no ConfigMap with data.{} found", .keys.join(" or data."))]
    NoConfigMap {
        path: String,
        keys: &'static [&'static str],
    },
    #[error("{path}: ConfigMap {name}: {source}")]
    Config {
        path: String,
        name: String,
        source: FieldError,
    },
}

/// One of the two ConfigMaps: the `data` keys it is read from, how they parse, and which part
/// of [`PolicyConfig`] it sets.
pub trait ConfigMapPolicy: Default + Sized {
    /// The keys it reads (`resource-qos-config` and `colocation-config`, or `memory-qos` and
    /// `proactive-reclaim`); a
    /// ConfigMap manifest carrying none of them is not this one.
    const KEYS: &'static [&'static str];
    /// Parses the ConfigMap's data; `get` returns a key's text (`None`: absent).
    fn parse_data<'d>(
        get: &dyn Fn(&str) -> Option<&'d str>,
    ) -> Result<ParseOutcome<Self>, FieldError>;
    fn store(self, policy: &mut PolicyConfig);
}

/// The cluster ConfigMap (`ack-slo-config`): `resource-qos-config` and `colocation-config`.
/// A bad value in either keeps the last good ConfigMap as a whole (docs/contract.md §4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterConfigMap {
    pub qos: ClusterQosConfig,
    pub colocation: Colocation,
}

impl ConfigMapPolicy for ClusterConfigMap {
    const KEYS: &'static [&'static str] = &[CLUSTER_CONFIGMAP_KEY, COLOCATION_KEY];

    fn parse_data<'d>(
        get: &dyn Fn(&str) -> Option<&'d str>,
    ) -> Result<ParseOutcome<Self>, FieldError> {
        let qos = match get(CLUSTER_CONFIGMAP_KEY) {
            Some(text) => ClusterQosConfig::parse(text)?,
            None => ParseOutcome {
                config: ClusterQosConfig::default(),
                notes: vec![format!("no {CLUSTER_CONFIGMAP_KEY} key: defaults")],
            },
        };
        let mut notes = qos.notes;
        let colocation = Colocation::parse(get(COLOCATION_KEY))?;
        if let Some(why) = colocation.off_reason() {
            notes.push(format!(
                "colocation is off ({why}): BE pods keep their cpu/memory"
            ));
        }
        Ok(ParseOutcome {
            config: ClusterConfigMap {
                qos: qos.config,
                colocation,
            },
            notes,
        })
    }

    fn store(self, policy: &mut PolicyConfig) {
        policy.cluster = self.qos;
        policy.colocation = self.colocation;
    }
}

/// The namespace ConfigMap (`ack-slo-pod-config`): the namespace lists of memory QoS
/// (`memory-qos`) and of proactive reclaim (`proactive-reclaim`). A bad value in either keeps
/// the last good ConfigMap as a whole (docs/contract.md §4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamespaceConfigMap {
    pub memory_qos: NamespaceQosConfig,
    pub proactive_reclaim: NamespaceQosConfig,
}

impl ConfigMapPolicy for NamespaceConfigMap {
    const KEYS: &'static [&'static str] = &[
        NAMESPACE_CONFIGMAP_KEY,
        NAMESPACE_CONFIGMAP_PROACTIVE_RECLAIM_KEY,
    ];

    fn parse_data<'d>(
        get: &dyn Fn(&str) -> Option<&'d str>,
    ) -> Result<ParseOutcome<Self>, FieldError> {
        let memory_qos = match get(NAMESPACE_CONFIGMAP_KEY) {
            Some(text) => NamespaceQosConfig::parse(text)?,
            None => ParseOutcome {
                config: NamespaceQosConfig::default(),
                notes: vec![format!("no {NAMESPACE_CONFIGMAP_KEY} key: defaults")],
            },
        };
        let mut notes = memory_qos.notes;
        // An absent `proactive-reclaim` is the usual case (the feature is opt-in): no note.
        let proactive_reclaim = match get(NAMESPACE_CONFIGMAP_PROACTIVE_RECLAIM_KEY) {
            Some(text) => {
                let out =
                    NamespaceQosConfig::parse_key(text, NAMESPACE_CONFIGMAP_PROACTIVE_RECLAIM_KEY)?;
                notes.extend(out.notes);
                out.config
            }
            None => NamespaceQosConfig::default(),
        };
        Ok(ParseOutcome {
            config: NamespaceConfigMap {
                memory_qos: memory_qos.config,
                proactive_reclaim,
            },
            notes,
        })
    }

    fn store(self, policy: &mut PolicyConfig) {
        policy.namespaces = self.memory_qos;
        policy.proactive_reclaim_namespaces = self.proactive_reclaim;
    }
}

/// Loads the policy from the optional ConfigMap manifest files (embedded defaults for a
/// missing one). What was accepted but not used is added to `notes`.
pub fn load_policy(
    cluster: Option<&Path>,
    namespaces: Option<&Path>,
    notes: &mut Vec<String>,
) -> Result<PolicyConfig, PolicyLoadError> {
    let mut config = PolicyConfig::default();
    load_file::<ClusterConfigMap>(cluster, &mut config, notes)?;
    load_file::<NamespaceConfigMap>(namespaces, &mut config, notes)?;
    Ok(config)
}

fn load_file<C: ConfigMapPolicy>(
    path: Option<&Path>,
    config: &mut PolicyConfig,
    notes: &mut Vec<String>,
) -> Result<(), PolicyLoadError> {
    let Some(path) = path else {
        return Ok(());
    };
    let text = manifest::read_file(path)?;
    let out = from_manifests::<C>(&text, &path.display().to_string())?;
    notes.extend(out.notes);
    out.config.store(config);
    Ok(())
}

/// Parses the first ConfigMap carrying one of `C::KEYS` in a manifest stream read from `path`.
pub fn from_manifests<C: ConfigMapPolicy>(
    text: &str,
    path: &str,
) -> Result<ParseOutcome<C>, PolicyLoadError> {
    let objects = manifest::read_objects(text).map_err(|source| PolicyLoadError::Manifest {
        path: path.to_owned(),
        source,
    })?;
    let (name, data) = objects
        .iter()
        .filter(|o| manifest::kind(o) == "ConfigMap")
        .find_map(|o| {
            let data = o.get("data")?;
            C::KEYS
                .iter()
                .any(|k| data.get(k).is_some())
                .then(|| (manifest::name(o), data))
        })
        .ok_or_else(|| PolicyLoadError::NoConfigMap {
            path: path.to_owned(),
            keys: C::KEYS,
        })?;
    C::parse_data(&|key| data.get(key)?.as_str()).map_err(|source| PolicyLoadError::Config {
        path: path.to_owned(),
        name: name.to_owned(),
        source,
    })
}

/// ConfigMap `data` as the watch sees it; a missing key means that key's defaults.
pub fn from_data<C: ConfigMapPolicy>(
    data: &BTreeMap<String, String>,
) -> Result<ParseOutcome<C>, FieldError> {
    C::parse_data(&|key| data.get(key).map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn namespace_configmap_reads_both_lists() {
        let out = from_data::<NamespaceConfigMap>(&data(&[
            ("memory-qos", r#"{"enabledNamespaces": ["a"]}"#),
            ("proactive-reclaim", r#"{"disabledNamespaces": ["b"]}"#),
        ]))
        .expect("parses");
        let mut policy = PolicyConfig::default();
        out.config.store(&mut policy);
        assert!(policy.namespaces.enabled.contains("a"));
        assert!(policy.namespaces.disabled.is_empty());
        assert!(policy.proactive_reclaim_namespaces.disabled.contains("b"));
        assert!(out.notes.is_empty(), "{:?}", out.notes);

        let only = from_data::<NamespaceConfigMap>(&data(&[(
            "proactive-reclaim",
            r#"{"enabledNamespaces": ["c"]}"#,
        )]))
        .expect("parses");
        assert_eq!(only.notes, ["no memory-qos key: defaults"]);
        assert!(only.config.proactive_reclaim.enabled.contains("c"));

        let err = from_data::<NamespaceConfigMap>(&data(&[
            ("memory-qos", "{}"),
            ("proactive-reclaim", r#"{"enabledNamespaces": "c"}"#),
        ]))
        .expect_err("a bad list")
        .to_string();
        assert_eq!(
            err,
            "proactive-reclaim.enabledNamespaces: \"c\" is not a list of namespace names"
        );
    }

    #[test]
    fn a_manifest_with_only_proactive_reclaim_is_the_namespace_configmap() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ack-slo-pod-config, namespace: kube-system}\ndata:\n  proactive-reclaim: '{\"enabledNamespaces\": [\"shop\"]}'\n";
        let out = from_manifests::<NamespaceConfigMap>(text, "pod-config.yaml").expect("parses");
        assert!(out.config.proactive_reclaim.enabled.contains("shop"));
    }
}
