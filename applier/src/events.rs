//! The memory QoS Events of a pass as `kubectl describe pod` shows them.
//!
//! Pure: [`event_for`] turns a pass's report into at most one Event (Normal
//! `MemoryQOSApplied` only when something was written, i.e. one per change, never per resync,
//! or on the first complete pass of a pod whose knobs this kernel has none of;
//! Warning `MemoryQOSRefused` / `MemoryQOSFailed`). Identical Events within a window are
//! dropped by [`koord_runtime::EventDedup`] in the event sink.

use std::fmt::Write as _;

use crate::cgroup::Outcome;
use crate::plan::Target;
use crate::pod_event::{EventKind, PodEvent, truncate_note};
use crate::report::{PodReport, PodStatus};

pub const REASON_APPLIED: &str = "MemoryQOSApplied";
pub const REASON_REFUSED: &str = "MemoryQOSRefused";
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
        for k in report.knobs.iter().filter(|k| &k.target == *target) {
            match k.outcome {
                Outcome::Written | Outcome::Unchanged => {
                    let _ = write!(msg, " {}={}", k.file, value_text(&k.new));
                }
                Outcome::Unsupported if !unsupported.contains(&k.file) => unsupported.push(k.file),
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
    if !report.pending.is_empty() {
        let _ = write!(msg, "; not started yet: {}", report.pending.join(" "));
    }
    truncate_note(msg)
}

/// A pod none of whose knobs this kernel has (an LS pod's memory QoS on mainline cgroup v1)
/// writes nothing, so "only when something was written" would leave it without any Event:
/// its first complete pass says what the node cannot do, once per version of the pod.
fn nothing_supported(report: &PodReport) -> bool {
    report.first_pass
        && !report.knobs.is_empty()
        && report.count(Outcome::Unsupported) == report.knobs.len()
}

/// The Event a pass deserves, if any.
pub fn event_for(report: &PodReport) -> Option<PodEvent> {
    let (kind, reason, message) = match report.status {
        PodStatus::Unchanged if nothing_supported(report) => {
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
