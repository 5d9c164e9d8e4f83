//! The Event a pod hears when the QoS-level protection above it changed: the ancestors' part
//! of the pod's Event texts, worded with the translator's reasons. Pure.

use std::fmt::Write as _;

use koord_translator::cgroup::{CgroupVersion, Outcome};
use koord_translator::pod::event::{EventKind, PodEvent, truncate_note};
use koord_translator::pod::events::{REASON_APPLIED, REASON_FAILED};

use super::report::{AncestorsReport, ProtectedPod};

/// The Event for a pod whose pod-level protection changed, once the ancestors pass after that
/// change is done: Normal `MemoryQOSApplied` listing what the directories above the pod now
/// hold when the pass wrote one of them, Warning `MemoryQOSFailed` when one failed, else none.
/// Only such pods hear of it: the ancestors change with every pod of the node, and telling
/// every other pod would be an Event storm (the node-level writes are in the metrics and logs).
///
/// `cgroup v2: QoS-level protection (sum of the children): kubepods/burstable
/// memory.min=201326592 memory.low=234881024; kubepods memory.min=201326592 memory.low=234881024`
pub fn ancestors_event(
    pod: &ProtectedPod,
    version: CgroupVersion,
    report: &AncestorsReport,
) -> Option<PodEvent> {
    let above: Vec<_> = report
        .cgroups
        .iter()
        .filter(|c| c.level.is_above(pod.kube_qos))
        .collect();
    let failed: Vec<String> = above
        .iter()
        .filter(|c| c.outcome == Outcome::Failed)
        .map(|c| {
            format!(
                "{} {}: {}",
                c.cgroup,
                c.file,
                c.reason.as_deref().unwrap_or("unknown error")
            )
        })
        .collect();
    let (kind, reason, message) = if !failed.is_empty() {
        (
            EventKind::Warning,
            REASON_FAILED,
            format!(
                "cgroup write failed: QoS-level protection: {}",
                failed.join("; ")
            ),
        )
    } else if above.iter().any(|c| c.outcome == Outcome::Written) {
        let mut msg = format!("cgroup {version}: QoS-level protection (sum of the children):");
        let mut last: Option<&str> = None;
        for c in &above {
            let Some(new) = c.new.as_deref() else {
                continue;
            };
            if last != Some(c.cgroup.as_str()) {
                let sep = if last.is_some() { ";" } else { "" };
                let _ = write!(msg, "{sep} {}", c.cgroup);
                last = Some(c.cgroup.as_str());
            }
            let _ = write!(msg, " {}={new}", c.file);
            if c.kept_kubelet_value {
                let _ = write!(msg, " (the kubelet's)");
            }
        }
        (EventKind::Normal, REASON_APPLIED, msg)
    } else {
        return None;
    };
    Some(PodEvent {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        kind,
        reason,
        message: truncate_note(message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::ancestors::KubeletMemoryQos;

    fn ancestors_report(outcomes: [Outcome; 3], kept: bool) -> AncestorsReport {
        use crate::node::ancestors::plan::Level;
        use crate::node::ancestors::report::AncestorReport;
        use koord_translator::cgroup::layout::KubeQos;
        let levels = [
            (Level::Qos(KubeQos::Burstable), "kubepods/burstable", "200"),
            (Level::Qos(KubeQos::BestEffort), "kubepods/besteffort", "0"),
            (Level::Kubepods, "kubepods", "250"),
        ];
        let mut cgroups = Vec::new();
        for ((level, cgroup, v), outcome) in levels.into_iter().zip(outcomes) {
            for file in ["memory.min", "memory.low"] {
                cgroups.push(AncestorReport {
                    cgroup: cgroup.into(),
                    level,
                    file,
                    path: format!("/sys/fs/cgroup/{cgroup}/{file}").into(),
                    children: 2,
                    sum: Some(v.into()),
                    old: Some("0".into()),
                    new: (outcome != Outcome::Failed).then(|| v.to_owned()),
                    outcome,
                    kept_kubelet_value: kept && level == Level::Kubepods && file == "memory.min",
                    reason: (outcome == Outcome::Failed).then(|| "Permission denied".to_owned()),
                });
            }
        }
        AncestorsReport {
            kubelet_memory_qos: if kept {
                KubeletMemoryQos::Tiered
            } else {
                KubeletMemoryQos::Off
            },
            cgroups,
        }
    }

    #[test]
    fn ancestors_event_table() {
        use Outcome::{Failed as F, Unchanged as U, Written as W};
        use koord_translator::cgroup::layout::KubeQos;
        let pod = |kube_qos| ProtectedPod {
            namespace: "shop".into(),
            name: "redis-0".into(),
            uid: "u1".into(),
            kube_qos,
        };
        let v2 = CgroupVersion::V2;
        let ls = pod(KubeQos::Burstable);
        let ev = ancestors_event(&ls, v2, &ancestors_report([W, U, W], false)).expect("event");
        assert_eq!((ev.kind, ev.reason), (EventKind::Normal, REASON_APPLIED));
        assert_eq!(
            ev.message,
            "cgroup v2: QoS-level protection (sum of the children): kubepods/burstable \
             memory.min=200 memory.low=200; kubepods memory.min=250 memory.low=250"
        );
        // A Guaranteed pod sits directly under kubepods: only kubepods is named.
        let ev = ancestors_event(
            &pod(KubeQos::Guaranteed),
            v2,
            &ancestors_report([W, U, W], true),
        )
        .expect("event");
        assert_eq!(
            ev.message,
            "cgroup v2: QoS-level protection (sum of the children): kubepods \
             memory.min=250 (the kubelet's) memory.low=250"
        );
        // Nothing above the pod was written: no Event (only besteffort changed).
        assert_eq!(
            ancestors_event(&ls, v2, &ancestors_report([U, W, U], false)),
            None
        );
        assert_eq!(
            ancestors_event(&ls, v2, &ancestors_report([U, U, U], false)),
            None
        );
        // A failed write above the pod is a Warning naming the file.
        let ev = ancestors_event(&ls, v2, &ancestors_report([W, U, F], false)).expect("event");
        assert_eq!((ev.kind, ev.reason), (EventKind::Warning, REASON_FAILED));
        assert_eq!(
            ev.message,
            "cgroup write failed: QoS-level protection: kubepods memory.min: Permission denied; \
             kubepods memory.low: Permission denied"
        );
        // A failure elsewhere (besteffort) is not this LS pod's business.
        assert!(
            ancestors_event(&ls, v2, &ancestors_report([W, F, U], false))
                .is_some_and(|e| e.reason == REASON_APPLIED)
        );
    }
}
