//! The memory QoS Events of a pass as `kubectl describe pod` shows them.
//!
//! Pure: [`event_for`] turns a pass's report into at most one Event (Normal
//! `MemoryQOSApplied` only when something was written, i.e. one per change, never per resync,
//! or on the first complete pass of a pod whose knobs this kernel has none of;
//! Warning `MemoryQOSRefused` / `MemoryQOSFailed`). Identical Events within a window are
//! dropped by [`koord_runtime::EventDedup`] in the event sink.

use std::fmt::Write as _;

use crate::cgroup::Outcome;
use crate::cgroup::knob_map::CPU_IDLE;
use crate::pod::event::{EventKind, PodEvent, truncate_note};
use crate::pod::plan::Target;
use crate::pod::report::{KnobReport, PodReport, PodStatus};

pub const REASON_APPLIED: &str = "MemoryQOSApplied";
pub const REASON_REFUSED: &str = "MemoryQOSRefused";
/// Normal: an in-place resize is under way; the values last applied are kept.
pub const REASON_HELD: &str = "MemoryQOSHeld";
pub const REASON_FAILED: &str = "MemoryQOSFailed";

fn value_text(v: &str) -> String {
    if v.contains(' ') {
        format!("{v:?}")
    } else {
        v.to_owned()
    }
}

/// `cgroup v2: pod memory.min=0 ...; redis memory.min=0 ... memory.wmark_high=79691776 (read);
/// unsupported: memory.priority ...`
pub fn applied_message(report: &PodReport) -> String {
    let mut msg = format!("cgroup {}:", report.cgroup_version);
    let mut targets: Vec<&Target> = Vec::new();
    for k in &report.knobs {
        if !targets.contains(&&k.target) {
            targets.push(&k.target);
        }
    }
    let mut unsupported: Vec<&str> = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let _ = write!(msg, "{} {target}", if i == 0 { "" } else { ";" });
        // The sources kubectl describe should name: where the pod's numbers came from, and
        // which entries are sidecars (init containers by spec).
        match target {
            Target::Pod if report.pod_level_resources => msg.push_str(" (pod-level resources)"),
            Target::Container(name) if report.sidecars.contains(name) => msg.push_str(" (sidecar)"),
            _ => {}
        }
        for k in report.knobs.iter().filter(|k| &k.target == *target) {
            match k.outcome {
                Outcome::Written | Outcome::Unchanged => {
                    let _ = write!(msg, " {}={}", k.file, value_text(&k.new));
                }
                Outcome::Unsupported
                    if !unsupported.contains(&k.file) && !emulated_here(report, k.file) =>
                {
                    unsupported.push(k.file);
                }
                _ => {}
            }
        }
        if let Target::Container(name) = target {
            for (file, v) in report.read_back.get(name).into_iter().flatten() {
                let _ = write!(msg, " {file}={v} (read)");
            }
        }
    }
    if !unsupported.is_empty() {
        unsupported.sort_unstable();
        let _ = write!(msg, "; unsupported on this node: {}", unsupported.join(" "));
    }
    if !report.emulated.is_empty() {
        // Containers with the same knobs emulated named together.
        let mut groups: Vec<(&[&str], Vec<&str>)> = Vec::new();
        for (container, knobs) in &report.emulated {
            match groups.iter_mut().find(|(k, _)| *k == knobs.as_slice()) {
                Some((_, names)) => names.push(container),
                None => groups.push((knobs, vec![container])),
            }
        }
        let groups: Vec<String> = groups
            .iter()
            .map(|(knobs, names)| format!("{} for {}", knobs.join(" "), names.join(" ")))
            .collect();
        let _ = write!(
            msg,
            "; emulated on this node with {}: {}",
            report.emulated_by,
            groups.join(", ")
        );
    }
    if !report.pending.is_empty() {
        let _ = write!(msg, "; not started yet: {}", report.pending.join(" "));
    }
    if report.set_at_creation {
        msg.push_str("; set at container creation (NRI)");
    }
    truncate_note(msg)
}

/// The knob is one a node feature emulates for a container of this pod
/// ([`crate::pod::hooks`]).
fn emulated_here(report: &PodReport, file: &str) -> bool {
    report.emulated.values().any(|knobs| knobs.contains(&file))
}

/// A pod none of whose knobs this kernel has (an LS pod's memory QoS on mainline cgroup v1)
/// writes nothing, so "only when something was written" would leave it without any Event:
/// its first complete pass says what the node cannot do, once per version of the pod.
///
/// `cpu.idle` held at 0 does not count as a knob the pod has: the node plans it for every
/// annotated pod wherever the kernel has the file and no CPU QoS uses it
/// ([`crate::pod::plan::NodeCaps::cpu_idle_reset`]), so on mainline v1 it would otherwise make every
/// such pod "supported" and silent.
fn nothing_supported(report: &PodReport) -> bool {
    let is_idle_reset =
        |k: &&KnobReport| k.file == CPU_IDLE && k.new == "0" && k.outcome == Outcome::Unchanged;
    let (mut knobs, mut unsupported) = (0, 0);
    for k in report.knobs.iter().filter(|k| !is_idle_reset(k)) {
        knobs += 1;
        unsupported += usize::from(k.outcome == Outcome::Unsupported);
    }
    report.first_pass && knobs > 0 && unsupported == knobs
}

/// The first complete pass of a pod whose containers the runtime created with their values
/// (the NRI plugin) finds nothing to write, and still deserves the Event that says what is in
/// place: once per version of the pod, as a written pass would post it.
fn set_at_creation(report: &PodReport) -> bool {
    report.first_pass && report.set_at_creation
}

/// The Event a pass deserves, if any.
pub fn event_for(report: &PodReport) -> Option<PodEvent> {
    let (kind, reason, message) = match report.status {
        PodStatus::Unchanged if nothing_supported(report) || set_at_creation(report) => {
            (EventKind::Normal, REASON_APPLIED, applied_message(report))
        }
        PodStatus::Unmanaged | PodStatus::Unchanged => return None,
        PodStatus::Applied => (EventKind::Normal, REASON_APPLIED, applied_message(report)),
        PodStatus::Refused => (
            EventKind::Warning,
            REASON_REFUSED,
            format!(
                "koordinator.sh/resolved-qos refused, nothing written: {}",
                report.reason.as_deref().unwrap_or("invalid")
            ),
        ),
        PodStatus::Held => (
            EventKind::Normal,
            REASON_HELD,
            format!(
                "koordinator.sh/resolved-qos held: {}",
                report.reason.as_deref().unwrap_or("in-place resize")
            ),
        ),
        PodStatus::Failed => (
            EventKind::Warning,
            REASON_FAILED,
            format!(
                "cgroup write failed: {}",
                report.reason.as_deref().unwrap_or("unknown error")
            ),
        ),
    };
    Some(PodEvent {
        namespace: report.namespace.clone(),
        name: report.name.clone(),
        uid: report.uid.clone(),
        kind,
        reason,
        message: truncate_note(message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::CgroupVersion;
    use koord_api::knobs::{
        MEMORY_WMARK_MIN_ADJ as BE_FIRST_KNOB, MEMORY_WMARK_RATIO, MEMORY_WMARK_SCALE_FACTOR,
    };

    /// The knobs async reclaim emulates, as the applier's reclaim feature lists them.
    const ASYNC_KNOBS: [&str; 2] = [MEMORY_WMARK_RATIO, MEMORY_WMARK_SCALE_FACTOR];

    fn knob(file: &'static str, new: &str, outcome: Outcome) -> KnobReport {
        KnobReport {
            target: Target::Container("app".into()),
            knob: file,
            file,
            path: crate::pod::report::KnobPath {
                dir: std::path::Path::new("/sys/fs/cgroup/x").into(),
                file,
            },
            old: Some(new.to_owned()),
            new: new.to_owned(),
            outcome,
            reason: None,
        }
    }

    fn unchanged_report(first_pass: bool, knobs: Vec<KnobReport>) -> PodReport {
        PodReport {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            cgroup_version: CgroupVersion::V1,
            cgroup_driver: crate::cgroup::CgroupDriver::Cgroupfs,
            kubelet_cgroup_root: "/".into(),
            dry_run: false,
            status: PodStatus::Unchanged,
            reason: None,
            knobs,
            read_back: Default::default(),
            pending: Vec::new(),
            sidecars: Vec::new(),
            pod_level_resources: false,
            first_pass,
            set_at_creation: false,
            emulated: Default::default(),
            emulated_by: "",
        }
    }

    /// A knob the kernel lacks and the applier emulates is named as emulated (with the
    /// containers), not as unsupported; one it neither has nor emulates stays unsupported.
    #[test]
    fn emulated_knobs_are_named_as_such() {
        use Outcome::{Unsupported, Written};
        let knobs = vec![
            knob("memory.min", "134217728", Written),
            knob("memory.wmark_ratio", "95", Unsupported),
            knob("memory.wmark_scale_factor", "20", Unsupported),
            knob("memory.wmark_min_adj", "-25", Unsupported),
        ];
        let mut r = unchanged_report(true, knobs);
        r.status = PodStatus::Applied;
        let plain = applied_message(&r);
        assert!(
            plain.contains(
                "unsupported on this node: memory.wmark_min_adj memory.wmark_ratio memory.wmark_scale_factor"
            ),
            "{plain}"
        );
        r.emulated = [("app".to_owned(), ASYNC_KNOBS.to_vec())].into();
        r.emulated_by = "memory.reclaim";
        let msg = applied_message(&r);
        assert!(
            msg.contains("unsupported on this node: memory.wmark_min_adj;"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "emulated on this node with memory.reclaim: memory.wmark_ratio memory.wmark_scale_factor for app"
            ),
            "{msg}"
        );
        // BE-first too, and more containers: grouped by the knobs.
        let mut all = ASYNC_KNOBS.to_vec();
        all.push(BE_FIRST_KNOB);
        r.emulated.insert("app".into(), all.clone());
        r.emulated.insert("side".into(), all);
        r.emulated.insert("solo".into(), vec![BE_FIRST_KNOB]);
        let msg = applied_message(&r);
        assert!(!msg.contains("unsupported on this node"), "{msg}");
        assert!(
            msg.contains(
                "emulated on this node with memory.reclaim: memory.wmark_ratio memory.wmark_scale_factor memory.wmark_min_adj for app side, memory.wmark_min_adj for solo"
            ),
            "{msg}"
        );
    }

    /// Containers created with their values (NRI): the first complete pass, unchanged, says
    /// what is in place once; later passes and pods the plugin did not set stay silent.
    #[test]
    fn set_at_creation_event_table() {
        use Outcome::Unchanged;
        let knobs = || vec![knob("memory.min", "134217728", Unchanged)];
        for (what, first_pass, nri, want) in [
            ("NRI, first complete pass", true, true, true),
            ("NRI, a resync", false, true, false),
            (
                "watch only, first pass unchanged (applier restarted)",
                true,
                false,
                false,
            ),
        ] {
            let mut r = unchanged_report(first_pass, knobs());
            r.set_at_creation = nri;
            let ev = event_for(&r);
            assert_eq!(ev.is_some(), want, "{what}: {ev:?}");
            if let Some(ev) = ev {
                assert_eq!(ev.reason, REASON_APPLIED);
                assert_eq!(
                    ev.message,
                    "cgroup v1: app memory.min=134217728; set at container creation (NRI)"
                );
            }
        }
    }

    /// An unchanged pass posts `MemoryQOSApplied` only on the first complete pass of a pod none
    /// of whose knobs the kernel has; `cpu.idle` held at 0 is not one of the pod's knobs.
    #[test]
    fn unchanged_pass_event_table() {
        use Outcome::{Unchanged, Unsupported};
        let rows: Vec<(&str, bool, Vec<KnobReport>, bool)> = vec![
            (
                "nothing supported, first pass",
                true,
                vec![knob("memory.min", "0", Unsupported)],
                true,
            ),
            (
                "nothing supported, later pass",
                false,
                vec![knob("memory.min", "0", Unsupported)],
                false,
            ),
            (
                "nothing supported but cpu.idle held at 0 (mainline v1)",
                true,
                vec![
                    knob("memory.min", "0", Unsupported),
                    knob(CPU_IDLE, "0", Unchanged),
                ],
                true,
            ),
            (
                "a supported knob unchanged (applier restarted)",
                true,
                vec![
                    knob("memory.min", "0", Unsupported),
                    knob("cpu.shares", "102", Unchanged),
                ],
                false,
            ),
            (
                "cpu.idle 1 from the fallback is the pod's own knob",
                true,
                vec![
                    knob("memory.min", "0", Unsupported),
                    knob(CPU_IDLE, "1", Unchanged),
                ],
                false,
            ),
            (
                "only cpu.idle held at 0",
                true,
                vec![knob(CPU_IDLE, "0", Unchanged)],
                false,
            ),
            ("no knobs", true, vec![], false),
        ];
        for (what, first_pass, knobs, want) in rows {
            let ev = event_for(&unchanged_report(first_pass, knobs));
            assert_eq!(ev.is_some(), want, "{what}: {ev:?}");
            if let Some(ev) = ev {
                assert_eq!(ev.reason, REASON_APPLIED, "{what}");
                assert!(
                    ev.message.contains("unsupported on this node: memory.min"),
                    "{what}: {}",
                    ev.message
                );
            }
        }
    }
}
