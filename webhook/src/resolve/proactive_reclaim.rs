//! Proactive reclaim of cold memory (docs/contract.md §2, Proactive reclaim): whether the
//! node's PSI-driven loop reclaims a container's memory, with which parameters, and each
//! container's floor. Precedence as memory QoS: pod annotation > namespace lists > cluster
//! class > off; parameters: the pod's over the class's over the defaults.

use koord_api::keys::ANNOTATION_PROACTIVE_RECLAIM;
use koord_api::{
    DecisionSource, ProactiveReclaimFloor, ProactiveReclaimParams, QosClass,
    ResolvedProactiveReclaim, proactive_reclaim_floor,
};
use serde_json::Value;

use super::memory_qos::ParamSource;
use super::pod_input::PodInput;
use crate::policy::{
    FieldError, NamespaceVerdict, PolicyConfig, ProactiveReclaimSetting,
    parse_proactive_reclaim_setting,
};

/// Reads the pod's `koordinator.sh/proactiveReclaim`, if it has one.
pub fn parse_pod_proactive_reclaim(
    pod: &PodInput<'_>,
) -> Result<Option<ProactiveReclaimSetting>, FieldError> {
    pod.annotation(ANNOTATION_PROACTIVE_RECLAIM)
        .map(parse_proactive_reclaim_annotation)
        .transpose()
}

/// The annotation's text: a JSON object of `enable` and any of the four parameters.
pub fn parse_proactive_reclaim_annotation(
    text: &str,
) -> Result<ProactiveReclaimSetting, FieldError> {
    let key = ANNOTATION_PROACTIVE_RECLAIM;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        FieldError::new(
            key,
            format!(
                "not valid JSON ({e}); expected like {{\"enable\": true, \"floorPercent\": 50}}"
            ),
        )
    })?;
    if !value.is_object() {
        return Err(FieldError::new(
            key,
            format!("{value} is not a JSON object like {{\"enable\": true}}"),
        ));
    }
    parse_proactive_reclaim_setting(&value, key)
}

/// The proactive reclaim decision before the floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProactiveReclaimDecision {
    pub enabled: bool,
    pub source: DecisionSource,
    pub params: ProactiveReclaimParams,
    /// Per parameter, in [`ProactiveReclaimParams::SPECS`] order: `Reset` (disabled: the
    /// defaults), `Recommended` (the default), `ClusterConfig` or `PodAnnotation`.
    pub param_sources: [ParamSource; 4],
}

/// The decision, or `None` when no source states proactive reclaim for the pod (then the
/// annotation has no such section and keeps its bytes). The pod annotation decides when it
/// says `enable`; else the namespace lists; else the class (a class section without `enable`
/// is off); a pod annotation with parameters only leaves the switch to the others.
/// Disabled, the parameters are the defaults, so a parameter edit in the ConfigMap does not
/// rewrite the annotation of pods it does not apply to.
pub fn decide_proactive_reclaim(
    class: QosClass,
    namespace: &str,
    pod_setting: Option<&ProactiveReclaimSetting>,
    config: &PolicyConfig,
) -> Option<ProactiveReclaimDecision> {
    let class_setting = config.cluster.class(class).proactive_reclaim.as_ref();
    let verdict = config.proactive_reclaim_namespaces.verdict(namespace);
    if pod_setting.is_none() && class_setting.is_none() && verdict == NamespaceVerdict::Unlisted {
        return None;
    }
    let (enabled, source) = match pod_setting.and_then(|p| p.enable) {
        Some(enable) => (enable, DecisionSource::PodAnnotation),
        None => match verdict {
            NamespaceVerdict::Disabled => (false, DecisionSource::NamespaceConfig),
            NamespaceVerdict::Enabled => (true, DecisionSource::NamespaceConfig),
            NamespaceVerdict::Unlisted => match class_setting {
                Some(s) => (s.enable == Some(true), DecisionSource::ClusterConfig),
                None => (false, DecisionSource::Default),
            },
        },
    };
    let mut params = ProactiveReclaimParams::DEFAULT;
    if !enabled {
        return Some(ProactiveReclaimDecision {
            enabled,
            source,
            params,
            param_sources: [ParamSource::Reset; 4],
        });
    }
    let mut param_sources = [ParamSource::Recommended; 4];
    for (setting, from) in [
        (class_setting, ParamSource::ClusterConfig),
        (pod_setting, ParamSource::PodAnnotation),
    ] {
        let Some(setting) = setting else { continue };
        for (s, was_set) in param_sources
            .iter_mut()
            .zip(setting.params.apply_to(&mut params))
        {
            if was_set {
                *s = from;
            }
        }
    }
    Some(ProactiveReclaimDecision {
        enabled,
        source,
        params,
        param_sources,
    })
}

/// One container as the floor reads it: its name, its `memory.min` and its memory request in
/// bytes (`None`: it states none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorInput<'n> {
    pub name: &'n str,
    pub memory_min: i64,
    pub request_bytes: Option<i64>,
}

/// The annotation's section: the decision and every container's floor.
pub fn proactive_reclaim_section<'n>(
    decision: &ProactiveReclaimDecision,
    containers: impl IntoIterator<Item = FloorInput<'n>>,
) -> ResolvedProactiveReclaim {
    let floor_percent = decision.params.floor_percent;
    ResolvedProactiveReclaim {
        enabled: decision.enabled,
        params: decision.params,
        source: decision.source,
        containers: containers
            .into_iter()
            .map(|c| {
                let floor_bytes =
                    proactive_reclaim_floor(c.memory_min, c.request_bytes, floor_percent);
                (c.name.to_owned(), ProactiveReclaimFloor { floor_bytes })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ClusterQosConfig, NamespaceQosConfig};
    use DecisionSource::{ClusterConfig, Default, NamespaceConfig, PodAnnotation};
    use ParamSource::{ClusterConfig as Cm, PodAnnotation as Pod, Recommended as Def, Reset};

    fn config(cluster: &str, namespaces: &str) -> PolicyConfig {
        PolicyConfig {
            cluster: if cluster.is_empty() {
                ClusterQosConfig::default()
            } else {
                ClusterQosConfig::parse(cluster).expect("cluster").config
            },
            proactive_reclaim_namespaces: if namespaces.is_empty() {
                NamespaceQosConfig::default()
            } else {
                NamespaceQosConfig::parse_key(namespaces, "proactive-reclaim")
                    .expect("namespaces")
                    .config
            },
            ..PolicyConfig::default()
        }
    }

    fn params(values: [i64; 4]) -> ProactiveReclaimParams {
        ProactiveReclaimParams {
            interval_seconds: values[0],
            stall_target_micros: values[1],
            step_permill: values[2],
            floor_percent: values[3],
        }
    }

    const LS_ON: &str = r#"{"clusterStrategy": {"lsClass": {"proactiveReclaim": {"enable": true, "intervalSeconds": 10, "floorPercent": 20}}}}"#;
    const LS_OFF: &str = r#"{"clusterStrategy": {"lsClass": {"proactiveReclaim": {"enable": false, "intervalSeconds": 10}}}}"#;
    const LSR_SECTION_ONLY: &str =
        r#"{"clusterStrategy": {"lsrClass": {"proactiveReclaim": {"stepPermill": 5}}}}"#;
    const NS: &str = r#"{"enabledNamespaces": ["on"], "disabledNamespaces": ["off"]}"#;

    /// (class, namespace, pod annotation, cluster, namespace lists) ->
    /// None, or (enabled, source, params, param sources).
    #[test]
    fn precedence_and_parameters() {
        type Want = Option<(bool, DecisionSource, [i64; 4], [ParamSource; 4])>;
        type Case<'t> = (QosClass, &'t str, Option<&'t str>, &'t str, &'t str, Want);
        let default = [6, 10_000, 10, 0];
        let cases: [Case<'_>; 16] = [
            // Nothing states it: no section.
            (QosClass::Ls, "default", None, "", "", None),
            (QosClass::Be, "default", None, LS_ON, NS, None),
            // The class.
            (
                QosClass::Ls,
                "default",
                None,
                LS_ON,
                "",
                Some((
                    true,
                    ClusterConfig,
                    [10, 10_000, 10, 20],
                    [Cm, Def, Def, Cm],
                )),
            ),
            (
                QosClass::Ls,
                "default",
                None,
                LS_OFF,
                "",
                Some((false, ClusterConfig, default, [Reset; 4])),
            ),
            // A class section without `enable` is stated and off; LSE reads lsrClass.
            (
                QosClass::Lse,
                "default",
                None,
                LSR_SECTION_ONLY,
                "",
                Some((false, ClusterConfig, default, [Reset; 4])),
            ),
            // The namespace lists over the class; the class's parameters still apply.
            (
                QosClass::Ls,
                "off",
                None,
                LS_ON,
                NS,
                Some((false, NamespaceConfig, default, [Reset; 4])),
            ),
            (
                QosClass::Ls,
                "on",
                None,
                LS_OFF,
                NS,
                Some((
                    true,
                    NamespaceConfig,
                    [10, 10_000, 10, 0],
                    [Cm, Def, Def, Def],
                )),
            ),
            (
                QosClass::Be,
                "on",
                None,
                "",
                NS,
                Some((true, NamespaceConfig, default, [Def; 4])),
            ),
            (QosClass::Be, "other", None, "", NS, None),
            // The pod over both; its parameters over the class's.
            (
                QosClass::Ls,
                "off",
                Some(r#"{"enable": true, "floorPercent": 50, "stepPermill": 30}"#),
                LS_ON,
                NS,
                Some((
                    true,
                    PodAnnotation,
                    [10, 10_000, 30, 50],
                    [Cm, Def, Pod, Pod],
                )),
            ),
            (
                QosClass::Ls,
                "on",
                Some(r#"{"enable": false, "floorPercent": 50}"#),
                LS_ON,
                NS,
                Some((false, PodAnnotation, default, [Reset; 4])),
            ),
            // A pod annotation without `enable` leaves the switch to the others...
            (
                QosClass::Ls,
                "default",
                Some(r#"{"stallTargetMicros": 5000}"#),
                LS_ON,
                "",
                Some((true, ClusterConfig, [10, 5_000, 10, 20], [Cm, Pod, Def, Cm])),
            ),
            (
                QosClass::Ls,
                "off",
                Some(r#"{"stallTargetMicros": 5000}"#),
                LS_ON,
                NS,
                Some((false, NamespaceConfig, default, [Reset; 4])),
            ),
            // ...and when none says, it is off by default, but stated, so written.
            (
                QosClass::Be,
                "default",
                Some(r#"{"stallTargetMicros": 5000}"#),
                "",
                "",
                Some((false, Default, default, [Reset; 4])),
            ),
            (
                QosClass::Be,
                "default",
                Some(r#"{"enable": true}"#),
                "",
                "",
                Some((true, PodAnnotation, default, [Def; 4])),
            ),
            (
                QosClass::System,
                "default",
                Some(r#"{"enable": null, "intervalSeconds": 1}"#),
                "",
                NS,
                Some((false, Default, default, [Reset; 4])),
            ),
        ];
        for (class, ns, annotation, cluster, namespaces, want) in cases {
            let pod = annotation.map(|a| parse_proactive_reclaim_annotation(a).expect("valid"));
            let got =
                decide_proactive_reclaim(class, ns, pod.as_ref(), &config(cluster, namespaces))
                    .map(|d| (d.enabled, d.source, d.params, d.param_sources));
            let want = want.map(|(e, s, p, ps)| (e, s, params(p), ps));
            assert_eq!(
                got, want,
                "{class} in {ns}, pod {annotation:?}, cluster {cluster}, namespaces {namespaces}"
            );
        }
    }

    #[test]
    fn floors_per_container() {
        let decision = decide_proactive_reclaim(
            QosClass::Ls,
            "default",
            Some(
                &parse_proactive_reclaim_annotation(r#"{"enable": true, "floorPercent": 50}"#)
                    .expect("valid"),
            ),
            &PolicyConfig::default(),
        )
        .expect("stated");
        let section = proactive_reclaim_section(
            &decision,
            [
                // (name, memory.min, request) -> floor
                FloorInput {
                    name: "app",
                    memory_min: 0,
                    request_bytes: Some(1000),
                },
                FloorInput {
                    name: "protected",
                    memory_min: 800,
                    request_bytes: Some(1000),
                },
                FloorInput {
                    name: "no-request",
                    memory_min: 0,
                    request_bytes: None,
                },
            ],
        );
        let floors: Vec<(&str, i64)> = section
            .containers
            .iter()
            .map(|(n, f)| (n.as_str(), f.floor_bytes))
            .collect();
        assert_eq!(
            floors,
            [("app", 500), ("no-request", 0), ("protected", 800)]
        );
        assert!(section.enabled);
        assert_eq!(section.source, PodAnnotation);
    }

    #[test]
    fn bad_annotations_name_the_field() {
        for (text, msg) in [
            (
                r#"{"enable": true, "stepPermill": 101}"#,
                "koordinator.sh/proactiveReclaim.stepPermill: 101 is out of range (allowed 1..100)",
            ),
            (
                r#"{"intervalSeconds": 0}"#,
                "koordinator.sh/proactiveReclaim.intervalSeconds: 0 is out of range (allowed 1..600)",
            ),
            (
                r#"{"stallTargetMicros": 2000000}"#,
                "koordinator.sh/proactiveReclaim.stallTargetMicros: 2000000 is out of range (allowed 100..1000000)",
            ),
            (
                r#"{"floorPercent": 101}"#,
                "koordinator.sh/proactiveReclaim.floorPercent: 101 is out of range (allowed 0..100)",
            ),
            (
                r#"{"enable": "true"}"#,
                "koordinator.sh/proactiveReclaim.enable: \"true\" is not true or false",
            ),
            (
                r#"{"policy": "auto"}"#,
                "koordinator.sh/proactiveReclaim.policy: unknown field (allowed: enable, intervalSeconds, stallTargetMicros, stepPermill, floorPercent)",
            ),
            (
                "true",
                "koordinator.sh/proactiveReclaim: true is not a JSON object like {\"enable\": true}",
            ),
        ] {
            assert_eq!(
                parse_proactive_reclaim_annotation(text)
                    .expect_err(text)
                    .to_string(),
                msg
            );
        }
        let not_json = parse_proactive_reclaim_annotation("{enable")
            .expect_err("not JSON")
            .to_string();
        assert!(
            not_json.starts_with("koordinator.sh/proactiveReclaim: not valid JSON ("),
            "{not_json}"
        );
    }
}
