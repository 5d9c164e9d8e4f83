//! The Event of a locality pass, worded as the reference shows it in `kubectl describe pod`:
//!
//! ```text
//! Normal  MemoryLocalityCompleted  Container redis completed: migrated memory from remote numa: 1 to local numa: 0
//!   Total: 1 container(s) completed, 0 failed, 0 skipped; cur local memory ratio 100, rest remote memory pages 0
//! Normal  MemoryLocalitySkipped    no target numa
//! ```
//!
//! Pure: built from the per-container outcomes.

use std::fmt::Write as _;

use super::container::{ContainerLocality, ContainerStatus, FailedPid};
use super::topology::IdSet;
use crate::cpu_list::format_list;
use crate::pod_event::EventKind;

pub const REASON_COMPLETED: &str = "MemoryLocalityCompleted";
pub const REASON_SKIPPED: &str = "MemoryLocalitySkipped";
pub const REASON_FAILED: &str = "MemoryLocalityFailed";

/// Reason, type and note of the pass's Event; `None` when no container was considered.
pub fn event_text(containers: &[ContainerLocality]) -> Option<(EventKind, &'static str, String)> {
    if containers.is_empty() {
        return None;
    }
    let count = |s: ContainerStatus| containers.iter().filter(|c| c.status == s).count();
    let (completed, failed, skipped) = (
        count(ContainerStatus::Completed),
        count(ContainerStatus::Failed),
        count(ContainerStatus::Skipped),
    );
    if completed == 0 && failed == 0 {
        let mut reasons: Vec<&str> = Vec::new();
        for c in containers {
            let r = c.reason.as_deref().unwrap_or(super::target::NO_TARGET_NUMA);
            if !reasons.contains(&r) {
                reasons.push(r);
            }
        }
        return Some((EventKind::Normal, REASON_SKIPPED, reasons.join("; ")));
    }
    let mut lines: Vec<String> = containers
        .iter()
        .filter(|c| c.status != ContainerStatus::Skipped)
        .map(container_line)
        .collect();
    // The ratio and the remaining pages are over the containers that were migrated.
    let (mut local, mut remote, mut rest) = (0u128, 0u128, 0u64);
    for c in containers
        .iter()
        .filter(|c| c.status == ContainerStatus::Completed)
    {
        if let Some(after) = &c.after {
            local += u128::from(after.local_bytes);
            remote += u128::from(after.remote_bytes);
            rest += after.remote_pages;
        }
    }
    let ratio = (local * 100).checked_div(local + remote).unwrap_or(100);
    let mut total =
        format!("Total: {completed} container(s) completed, {failed} failed, {skipped} skipped");
    if completed > 0 {
        let _ = write!(
            total,
            "; cur local memory ratio {ratio}, rest remote memory pages {rest}"
        );
    }
    lines.push(total);
    let (kind, reason) = if completed > 0 {
        (EventKind::Normal, REASON_COMPLETED)
    } else {
        (EventKind::Warning, REASON_FAILED)
    };
    Some((kind, reason, lines.join("\n")))
}

/// A node set as the Event shows it: `-` when empty.
fn nodes_text(nodes: &IdSet) -> String {
    if nodes.is_empty() {
        "-".to_owned()
    } else {
        format_list(nodes)
    }
}

fn failed_pids(pids: &[FailedPid]) -> String {
    let parts: Vec<String> = pids
        .iter()
        .map(|f| format!("failed pid: {}, error: {}", f.pid, f.error))
        .collect();
    format!(
        "failed to migrate the following processes: {}",
        parts.join("; ")
    )
}

/// One container's line.
pub fn container_line(c: &ContainerLocality) -> String {
    let mut s = format!("Container {}", c.name);
    match c.status {
        ContainerStatus::Completed => {
            let _ = write!(
                s,
                " completed: migrated memory from remote numa: {} to local numa: {}",
                nodes_text(&c.remote_nodes),
                nodes_text(&c.local_nodes)
            );
            if !c.failed_pids.is_empty() {
                let _ = write!(s, ", {}", failed_pids(&c.failed_pids));
            }
        }
        ContainerStatus::Failed => {
            if c.failed_pids.is_empty() {
                let _ = write!(
                    s,
                    " failed: {}",
                    c.reason.as_deref().unwrap_or("unknown error")
                );
            } else {
                let _ = write!(s, " {}", failed_pids(&c.failed_pids));
            }
        }
        ContainerStatus::Skipped => {
            let _ = write!(
                s,
                " skipped: {}",
                c.reason.as_deref().unwrap_or(super::target::NO_TARGET_NUMA)
            );
        }
    }
    s
}
