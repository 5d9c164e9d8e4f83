//! The IO side of resctrl: detect support once, keep one group per class with the right
//! schemata, and keep each class's tasks in its group. Works on any directory laid out like
//! `/sys/fs/resctrl`, so tests use a temporary tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use koord_api::{QosClass, ResolvedResctrlQos};

use super::schemata::{
    Domains, l3_way_mask, mba_value, parse_cbm_mask, parse_domains, render_schemata,
    schemata_matches,
};

/// The control groups this product owns, one per class that is partitioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClassGroup {
    Ls,
    Be,
}

impl ClassGroup {
    /// LSE/LSR/LS share the LS group; SYSTEM pods stay in the default group.
    pub fn of(class: QosClass) -> Option<Self> {
        match class {
            QosClass::Lse | QosClass::Lsr | QosClass::Ls => Some(Self::Ls),
            QosClass::Be => Some(Self::Be),
            QosClass::System => None,
        }
    }

    pub fn dir_name(self) -> &'static str {
        match self {
            Self::Ls => "koord-LS",
            Self::Be => "koord-BE",
        }
    }
}

/// What the hardware offers, read once from `info/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResctrlSupport {
    /// `(cbm_mask, min_cbm_bits)` when L3 CAT exists.
    pub l3: Option<(u64, u32)>,
    /// `(bandwidth_gran, min_bandwidth)` when MBA exists.
    pub mb: Option<(i64, i64)>,
    pub domains: Domains,
}

#[derive(Debug, thiserror::Error)]
pub enum ResctrlError {
    #[error("resctrl is not available at {0}: {1}")]
    Unsupported(PathBuf, String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Schemata(#[from] super::schemata::SchemataError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ResctrlError + '_ {
    move |source| ResctrlError::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_opt(path: &Path) -> Result<Option<String>, ResctrlError> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

fn read_num(path: &Path) -> Result<Option<i64>, ResctrlError> {
    Ok(read_opt(path)?.and_then(|s| s.trim().parse().ok()))
}

/// Detects resctrl under `root`: mounted (root `schemata` present) with L3 CAT and/or MBA.
pub fn detect(root: &Path) -> Result<ResctrlSupport, ResctrlError> {
    let schemata = read_opt(&root.join("schemata"))?.ok_or_else(|| {
        ResctrlError::Unsupported(root.to_owned(), "not mounted (no schemata file)".into())
    })?;
    let l3 = match read_opt(&root.join("info/L3/cbm_mask"))? {
        Some(mask) => {
            let min_bits = read_num(&root.join("info/L3/min_cbm_bits"))?.unwrap_or(1);
            Some((parse_cbm_mask(&mask)?, u32::try_from(min_bits).unwrap_or(1)))
        }
        None => None,
    };
    let mb = match read_num(&root.join("info/MB/bandwidth_gran"))? {
        Some(gran) => Some((
            gran,
            read_num(&root.join("info/MB/min_bandwidth"))?.unwrap_or(gran),
        )),
        None => None,
    };
    if l3.is_none() && mb.is_none() {
        return Err(ResctrlError::Unsupported(
            root.to_owned(),
            "neither L3 CAT nor MBA is offered".into(),
        ));
    }
    Ok(ResctrlSupport {
        l3,
        mb,
        domains: parse_domains(&schemata)?,
    })
}

/// One pod's wish: its class, its resolved partition, and the pids of its containers.
#[derive(Debug, Clone)]
pub struct PodResctrl {
    pub class: QosClass,
    pub qos: ResolvedResctrlQos,
    pub pids: Vec<u32>,
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlReport {
    pub groups_created: usize,
    pub schemata_written: usize,
    pub tasks_added: usize,
    pub tasks_removed: usize,
    /// Pids that vanished while being moved (exited processes): not an error.
    pub tasks_gone: usize,
}

/// The group's partition: the most common value among its pods (ties: the smallest), so one
/// pod with a stale annotation cannot flip the whole class.
fn group_partition<'p>(
    pods: impl Iterator<Item = &'p ResolvedResctrlQos>,
) -> Option<(i64, i64, i64)> {
    let mut counts: BTreeMap<(i64, i64, i64), usize> = BTreeMap::new();
    for q in pods {
        *counts
            .entry((
                q.cat_range_start_percent,
                q.cat_range_end_percent,
                q.mba_percent,
            ))
            .or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(k, _)| k)
}

fn read_tasks(path: &Path) -> Result<BTreeSet<u32>, ResctrlError> {
    Ok(read_opt(path)?
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// Writes one pid into a `tasks` file (the kernel takes one pid per write). A pid that exited
/// meanwhile gives ESRCH: reported as gone, not an error.
fn move_task(tasks: &Path, pid: u32) -> Result<bool, ResctrlError> {
    // `create` is a no-op on resctrl (the kernel makes `tasks` with the group); it lets a plain
    // directory tree stand in for the mount in tests.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(tasks)
        .map_err(io(tasks))?;
    match f.write_all(format!("{pid}\n").as_bytes()) {
        Ok(()) => Ok(true),
        Err(e) if Errno::from_io_error(&e) == Some(Errno::SRCH) => Ok(false),
        Err(e) => Err(io(tasks)(e)),
    }
}

/// One reconcile pass over every pod with an enabled `resctrlQOS`.
pub fn reconcile(
    root: &Path,
    support: &ResctrlSupport,
    pods: &[PodResctrl],
) -> Result<ResctrlReport, ResctrlError> {
    reconcile_with(root, support, pods, true)
}

/// [`reconcile`]; with `evict_others` false, tasks already in a group that are not in `pods`
/// stay where they are (`once` sees one pod, not the node).
pub fn reconcile_with(
    root: &Path,
    support: &ResctrlSupport,
    pods: &[PodResctrl],
    evict_others: bool,
) -> Result<ResctrlReport, ResctrlError> {
    let mut report = ResctrlReport::default();
    let mut by_group: BTreeMap<ClassGroup, Vec<&PodResctrl>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.qos.enabled) {
        if let Some(g) = ClassGroup::of(p.class) {
            by_group.entry(g).or_default().push(p);
        }
    }
    for group in [ClassGroup::Ls, ClassGroup::Be] {
        let dir = root.join(group.dir_name());
        let members = by_group.get(&group).map(Vec::as_slice).unwrap_or_default();
        let wanted: BTreeSet<u32> = members
            .iter()
            .flat_map(|p| p.pids.iter().copied())
            .collect();
        if members.is_empty() && !dir.exists() {
            continue;
        }
        if !dir.exists() {
            fs::create_dir(&dir).map_err(io(&dir))?;
            report.groups_created += 1;
        }
        if let Some((start, end, mba)) = group_partition(members.iter().map(|p| &p.qos)) {
            let mask = support
                .l3
                .map(|(cbm, min_bits)| l3_way_mask(cbm, start, end, min_bits))
                .transpose()?;
            let mba = support.mb.map(|(gran, min)| mba_value(mba, gran, min));
            let text = render_schemata(&support.domains, mask, mba);
            let path = dir.join("schemata");
            let current = read_opt(&path)?.unwrap_or_default();
            if !text.is_empty() && !schemata_matches(&current, &text) {
                fs::write(&path, &text).map_err(io(&path))?;
                report.schemata_written += 1;
            }
        }
        let tasks_path = dir.join("tasks");
        let current = read_tasks(&tasks_path)?;
        for pid in wanted.difference(&current) {
            if move_task(&tasks_path, *pid)? {
                report.tasks_added += 1;
            } else {
                report.tasks_gone += 1;
            }
        }
        // Tasks of deleted pods (or pods whose partition was disabled) go back to the default group.
        let root_tasks = root.join("tasks");
        let stale = current.difference(&wanted).filter(|_| evict_others);
        for pid in stale {
            if move_task(&root_tasks, *pid)? {
                report.tasks_removed += 1;
            } else {
                report.tasks_gone += 1;
            }
        }
    }
    Ok(report)
}
