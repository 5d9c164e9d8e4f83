//! `ack-slo-pod-config`: namespaces where a feature is switched on or off, one key per feature
//! (`memory-qos`, `proactive-reclaim`), each `{"enabledNamespaces": [..], "disabledNamespaces": [..]}`.

use std::collections::BTreeSet;

use koord_api::keys::NAMESPACE_CONFIGMAP_KEY;
use serde_json::Value;

use super::cluster::ParseOutcome;
use super::fields::FieldError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceQosConfig {
    pub enabled: BTreeSet<String>,
    pub disabled: BTreeSet<String>,
}

/// What the namespace lists say about one namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceVerdict {
    Enabled,
    Disabled,
    Unlisted,
}

impl NamespaceQosConfig {
    /// A namespace in both lists is disabled: the careful reading of a contradiction.
    pub fn verdict(&self, namespace: &str) -> NamespaceVerdict {
        if self.disabled.contains(namespace) {
            NamespaceVerdict::Disabled
        } else if self.enabled.contains(namespace) {
            NamespaceVerdict::Enabled
        } else {
            NamespaceVerdict::Unlisted
        }
    }

    /// Parses the JSON text of the `memory-qos` key.
    pub fn parse(text: &str) -> Result<ParseOutcome<Self>, FieldError> {
        Self::parse_key(text, NAMESPACE_CONFIGMAP_KEY)
    }

    /// Parses the JSON text of the namespace ConfigMap key `path` (errors and notes name it).
    pub fn parse_key(text: &str, path: &str) -> Result<ParseOutcome<Self>, FieldError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| FieldError::new(path, format!("not valid JSON: {e}")))?;
        let obj = root.as_object().ok_or_else(|| {
            FieldError::new(
                path,
                "must be a JSON object with enabledNamespaces / disabledNamespaces",
            )
        })?;
        let mut config = NamespaceQosConfig::default();
        let mut notes = Vec::new();
        for (key, value) in obj {
            let target = match key.as_str() {
                "enabledNamespaces" => &mut config.enabled,
                "disabledNamespaces" => &mut config.disabled,
                other => {
                    notes.push(format!("{path}.{other}: not used by this product"));
                    continue;
                }
            };
            if value.is_null() {
                continue;
            }
            let list = value.as_array().ok_or_else(|| {
                FieldError::new(
                    format!("{path}.{key}"),
                    format!("{value} is not a list of namespace names"),
                )
            })?;
            for (i, item) in list.iter().enumerate() {
                let name = item.as_str().ok_or_else(|| {
                    FieldError::new(
                        format!("{path}.{key}[{i}]"),
                        format!("{item} is not a namespace name"),
                    )
                })?;
                target.insert(name.to_owned());
            }
        }
        let both: Vec<&String> = config.enabled.intersection(&config.disabled).collect();
        if !both.is_empty() {
            notes.push(format!(
                "{path}: {both:?} listed as both enabled and disabled: treated as disabled"
            ));
        }
        Ok(ParseOutcome { config, notes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let out = NamespaceQosConfig::parse(r#"{"enabledNamespaces": ["allow-ns", "both"], "disabledNamespaces": ["block-ns", "both"]}"#)
            .expect("parses");
        let c = out.config;
        assert_eq!(c.verdict("allow-ns"), NamespaceVerdict::Enabled);
        assert_eq!(c.verdict("block-ns"), NamespaceVerdict::Disabled);
        assert_eq!(c.verdict("both"), NamespaceVerdict::Disabled);
        assert_eq!(c.verdict("other"), NamespaceVerdict::Unlisted);
        assert_eq!(out.notes.len(), 1);
    }

    #[test]
    fn broken() {
        for (text, msg) in [
            ("nope", "memory-qos: not valid JSON"),
            (
                r#"{"enabledNamespaces": "a"}"#,
                "memory-qos.enabledNamespaces: \"a\" is not a list of namespace names",
            ),
            (
                r#"{"disabledNamespaces": [1]}"#,
                "memory-qos.disabledNamespaces[0]: 1 is not a namespace name",
            ),
        ] {
            let err = NamespaceQosConfig::parse(text).expect_err(text).to_string();
            assert!(err.starts_with(msg), "{err}");
        }
        let err = NamespaceQosConfig::parse_key(r#"{"enabledNamespaces": 1}"#, "proactive-reclaim")
            .expect_err("not a list")
            .to_string();
        assert_eq!(
            err,
            "proactive-reclaim.enabledNamespaces: 1 is not a list of namespace names"
        );
    }
}
