//! The Event of a locality pass, worded as the reference's memory-locality page shows it in
//! `kubectl describe pod` (wording and punctuation kept, including the missing space in
//! `...No such process,from remote numa`):
//!
//! ```text
//! Normal  MemoryLocalityCompleted  Container redis completed: migrated memory from remote numa: 1 to local numa: 0
//!   Container side completed: failed to migrate the following processes: failed pid: 111111, error: No such process,from remote numa: 0 to local numa: 1
//!   Total: 2 container(s) completed, 0 failed, 0 skipped; cur local memory ratio 100, rest remote memory pages 0
//! Normal  MemoryLocalitySkipped    no target numa
//! ```
//!
//! Node sets are joined with commas (`0,1`), as the reference joins them. Pure: built from the
//! per-container outcomes.

use std::fmt::Write as _;

use koord_translator::pod::event::EventKind;

use super::container::{ContainerLocality, ContainerStatus, FailedPid};
use super::topology::IdSet;

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

/// A node set as the Event shows it: ids joined with commas, `-` when empty.
fn nodes_text(nodes: &IdSet) -> String {
    if nodes.is_empty() {
        return "-".to_owned();
    }
    let ids: Vec<String> = nodes.iter().map(u32::to_string).collect();
    ids.join(",")
}

/// `failed to migrate the following processes: failed pid: P, error: E; ...,from remote numa:
/// R to local numa: L`: the reference's text for a container some of whose processes could not
/// be migrated (no space before `,from`, as the reference prints it).
fn failed_pids(c: &ContainerLocality) -> String {
    let parts: Vec<String> = c
        .failed_pids
        .iter()
        .map(|f: &FailedPid| format!("failed pid: {}, error: {}", f.pid, f.error))
        .collect();
    format!(
        "failed to migrate the following processes: {},from remote numa: {} to local numa: {}",
        parts.join("; "),
        nodes_text(&c.remote_nodes),
        nodes_text(&c.local_nodes)
    )
}

/// One container's line.
pub fn container_line(c: &ContainerLocality) -> String {
    let mut s = format!("Container {}", c.name);
    match c.status {
        ContainerStatus::Completed if !c.failed_pids.is_empty() => {
            let _ = write!(s, " completed: {}", failed_pids(c));
        }
        ContainerStatus::Completed => {
            let _ = write!(
                s,
                " completed: migrated memory from remote numa: {} to local numa: {}",
                nodes_text(&c.remote_nodes),
                nodes_text(&c.local_nodes)
            );
        }
        ContainerStatus::Failed => {
            let why = if c.failed_pids.is_empty() {
                c.reason
                    .clone()
                    .unwrap_or_else(|| "unknown error".to_owned())
            } else {
                failed_pids(c)
            };
            let _ = write!(s, " failed: {why}");
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
