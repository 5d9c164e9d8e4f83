//! `colocation-config` of the cluster ConfigMap, as admission needs it: is colocation on, so
//! that a BE pod's cpu/memory may become `kubernetes.io/batch-cpu`/`batch-memory`
//! (docs/contract.md §2, Batch resources)? The text is parsed by `koord_api::colocation`, the
//! parser the applier uses to decide whether it advertises batch capacity: one meaning of "on".

use koord_api::colocation::{COLOCATION_KEY, ConfigError, parse_colocation};

use super::fields::FieldError;

/// Whether colocation is on, and where that came from (for the admission warning and
/// `resolve --explain`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Colocation {
    /// No `colocation-config` key (or no cluster ConfigMap): Koordinator's default, off.
    #[default]
    NotConfigured,
    /// `colocation-config` parses and its `enable` is not `true`.
    Disabled,
    /// `colocation-config` parses and says `"enable": true`.
    Enabled,
}

impl Colocation {
    pub fn is_enabled(self) -> bool {
        self == Colocation::Enabled
    }

    /// Parses the key's text (`None`: the key is absent).
    pub fn parse(text: Option<&str>) -> Result<Self, FieldError> {
        let Some(text) = text else {
            return Ok(Colocation::NotConfigured);
        };
        match parse_colocation(text) {
            Ok(c) if c.enable => Ok(Colocation::Enabled),
            Ok(_) => Ok(Colocation::Disabled),
            Err(e) => Err(FieldError::new(COLOCATION_KEY, without_key(&e))),
        }
    }

    /// Why a BE pod keeps its cpu/memory, in a sentence (`None` when colocation is on).
    pub fn off_reason(self) -> Option<&'static str> {
        match self {
            Colocation::Enabled => None,
            Colocation::NotConfigured => Some("the cluster ConfigMap has no colocation-config"),
            Colocation::Disabled => Some("colocation-config does not say \"enable\": true"),
        }
    }
}

/// The error text without its leading `colocation-config: `, which the field name carries.
fn without_key(e: &ConfigError) -> String {
    let text = e.to_string();
    text.strip_prefix(COLOCATION_KEY)
        .and_then(|t| t.strip_prefix(": "))
        .map_or_else(|| text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_only_with_enable_true() {
        assert_eq!(Colocation::parse(None), Ok(Colocation::NotConfigured));
        assert_eq!(Colocation::parse(Some("{}")), Ok(Colocation::Disabled));
        assert_eq!(
            Colocation::parse(Some(r#"{"enable": false}"#)),
            Ok(Colocation::Disabled)
        );
        assert_eq!(
            Colocation::parse(Some(
                r#"{"enable": true, "cpuReclaimThresholdPercent": 60}"#
            )),
            Ok(Colocation::Enabled)
        );
        let err = Colocation::parse(Some(
            r#"{"enable": true, "cpuReclaimThresholdPercent": 120}"#,
        ))
        .expect_err("out of range: refused, as the applier refuses it");
        assert_eq!(
            err.to_string(),
            "colocation-config: cpuReclaimThresholdPercent = 120 is out of range 0..100"
        );
        assert!(Colocation::parse(Some(r#"{"enable": "yes"}"#)).is_err());
    }
}
