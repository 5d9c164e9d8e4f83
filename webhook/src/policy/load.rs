//! Where a policy configuration comes from: ConfigMap manifests in files (the `resolve` command
//! and `serve --standalone`) or the `data` of a watched ConfigMap (the server in a cluster).
//! Both ConfigMaps go through the same two functions, [`from_manifests`] and [`from_data`].

use std::collections::BTreeMap;
use std::path::Path;

use koord_api::keys::{CLUSTER_CONFIGMAP_KEY, NAMESPACE_CONFIGMAP_KEY};

use super::cluster::{ClusterQosConfig, ParseOutcome};
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
    #[error("{path}: no ConfigMap with data.{key} found")]
    NoConfigMap { path: String, key: &'static str },
    #[error("{path}: ConfigMap {name}: {source}")]
    Config {
        path: String,
        name: String,
        source: FieldError,
    },
}

/// One of the two ConfigMaps: the `data` key it is read from, how its text parses, and which
/// part of [`PolicyConfig`] it sets.
pub trait ConfigMapPolicy: Default + Sized {
    /// `resource-qos-config` or `memory-qos`.
    const KEY: &'static str;
    fn parse_text(text: &str) -> Result<ParseOutcome<Self>, FieldError>;
    fn store(self, policy: &mut PolicyConfig);
}

impl ConfigMapPolicy for ClusterQosConfig {
    const KEY: &'static str = CLUSTER_CONFIGMAP_KEY;

    fn parse_text(text: &str) -> Result<ParseOutcome<Self>, FieldError> {
        ClusterQosConfig::parse(text)
    }

    fn store(self, policy: &mut PolicyConfig) {
        policy.cluster = self;
    }
}

impl ConfigMapPolicy for NamespaceQosConfig {
    const KEY: &'static str = NAMESPACE_CONFIGMAP_KEY;

    fn parse_text(text: &str) -> Result<ParseOutcome<Self>, FieldError> {
        NamespaceQosConfig::parse(text)
    }

    fn store(self, policy: &mut PolicyConfig) {
        policy.namespaces = self;
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
    load_file::<ClusterQosConfig>(cluster, &mut config, notes)?;
    load_file::<NamespaceQosConfig>(namespaces, &mut config, notes)?;
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

/// Parses the first ConfigMap carrying `C::KEY` in a manifest stream read from `path`.
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
        .find_map(|o| Some((manifest::name(o), o.get("data")?.get(C::KEY)?.as_str()?)))
        .ok_or_else(|| PolicyLoadError::NoConfigMap {
            path: path.to_owned(),
            key: C::KEY,
        })?;
    C::parse_text(data).map_err(|source| PolicyLoadError::Config {
        path: path.to_owned(),
        name: name.to_owned(),
        source,
    })
}

/// ConfigMap `data` as the watch sees it; a missing key means the defaults.
pub fn from_data<C: ConfigMapPolicy>(
    data: &BTreeMap<String, String>,
) -> Result<ParseOutcome<C>, FieldError> {
    match data.get(C::KEY) {
        Some(text) => C::parse_text(text),
        None => Ok(ParseOutcome {
            config: C::default(),
            notes: vec![format!("no {} key: defaults", C::KEY)],
        }),
    }
}
