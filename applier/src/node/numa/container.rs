//! What a locality pass did to one container: the input of the Event text, the metrics and the
//! `once` report. Pure data.

use serde::Serialize;

use super::numa_maps::Locality;
use super::timings::ContainerTimings;
use super::topology::IdSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerStatus {
    Completed,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedPid {
    pub pid: u32,
    pub error: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// One `migrate_pages(2)` per process.
    MigratePages,
    /// `move_pages(2)` in bounded batches (`--locality-max-pages-per-second`).
    MovePages,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLocality {
    pub name: String,
    pub status: ContainerStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub local_nodes: IdSet,
    pub remote_nodes: IdSet,
    pub pids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Locality>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Locality>,
    /// Remote pages before minus remote pages after.
    pub pages_migrated: u64,
    /// Pages the kernel reported it could not move.
    pub pages_not_moved: u64,
    /// Time spent in the migration syscalls (not the measurements).
    pub migrate_micros: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_pids: Vec<FailedPid>,
    /// Where the pass spent its time (`once --timings`; `None` in the default report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<ContainerTimings>,
}

impl ContainerLocality {
    pub fn new(name: &str, status: ContainerStatus, reason: Option<String>) -> Self {
        Self {
            name: name.to_owned(),
            status,
            reason,
            local_nodes: IdSet::new(),
            remote_nodes: IdSet::new(),
            pids: Vec::new(),
            method: None,
            before: None,
            after: None,
            pages_migrated: 0,
            pages_not_moved: 0,
            migrate_micros: 0,
            failed_pids: Vec::new(),
            timings: None,
        }
    }
}
