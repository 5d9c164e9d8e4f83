//! One pass of hierarchical memory protection over the node: read what the kernel shows in
//! the direct children of each QoS-class directory and of `kubepods`, and leave each ancestor's
//! `memory.min`/`memory.low` at their sum (see [`super::plan`]), bottom-up, through the one
//! cgroup writer (read, compare, write only what differs).
//!
//! The children are read from the kernel, not from the pod cache: `once` sees one pod, and
//! `run` may hold a pod whose cgroup is already gone or not made yet; what the kernel caps is
//! what is in its files. Each child's two files stay open between passes and are re-read with
//! one `pread` (as the pod pass keeps its knobs, `cgroup::writer::KeptKnob`), so a resync's
//! ancestors pass costs a directory listing and two reads per pod.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::io::Errno;

use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::writer::{CgroupDir, CgroupWriter, KeptKnob, KeptRead};
use koord_translator::cgroup::{Controller, Outcome};

use super::drift::{Left, moved};
use super::plan::{KubeletMemoryQos, Level, Protection, ProtectionFile, decide};
use super::report::{AncestorReport, AncestorsReport};
use crate::metrics::Metrics;

/// The node's ancestors of pods and how to reconcile them.
pub struct MemoryAncestors {
    layout: Layout,
    writer: CgroupWriter,
    kubelet_memory_qos: KubeletMemoryQos,
    metrics: Option<Arc<Metrics>>,
    /// Mainline v1 has no protection files: said once, not every pass.
    unsupported_logged: AtomicBool,
    /// Per child directory seen by the last pass: its `memory.min` and `memory.low` kept open.
    kept: Mutex<HashMap<PathBuf, KeptPair>>,
    /// On the systemd driver: the slices' values are also stored as their units' properties.
    systemd: Option<Arc<koord_translator::cgroup::systemd::Units>>,
    /// The files the last pass left at the sum (not the kubelet's), for [`Self::put_back_moved`].
    left: Mutex<Vec<Left>>,
    /// Held while a pass writes its files and while the check puts one back: a value the check
    /// found moved never lands over a newer one a pass is writing.
    writing: Mutex<()>,
    /// The files the check put back since the last pass: their units are called again, so
    /// that systemd stores the sums over what the mover stored (the kubelet writes through it).
    put_back: Mutex<HashSet<PathBuf>>,
}

/// A child's two files (`ProtectionFile::BOTH` order), each kept open when the fd budget allows.
type KeptPair = [Option<KeptKnob>; 2];

/// An ancestor's values for its systemd unit: per file (`ProtectionFile::BOTH` order) the file's
/// name, the text the pass wrote and whether the file differed before the pass.
struct UnitWants {
    dir: PathBuf,
    wants: [Option<(&'static str, String, bool)>; 2],
}

/// The values of one file over the direct children of a directory.
struct Children {
    count: usize,
    /// Per file (`ProtectionFile::BOTH` order): the values, or why they cannot be summed.
    values: [Result<Vec<Protection>, String>; 2],
}

impl MemoryAncestors {
    pub fn new(
        layout: Layout,
        dry_run: bool,
        kubelet_memory_qos: KubeletMemoryQos,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        // Once per command: what caps this pass's sums from above, if anything does.
        super::above::warn_unprotected_above(&layout);
        Self {
            layout,
            writer: CgroupWriter::new(dry_run),
            kubelet_memory_qos,
            metrics,
            unsupported_logged: AtomicBool::new(false),
            kept: Mutex::default(),
            systemd: None,
            left: Mutex::default(),
            writing: Mutex::default(),
            put_back: Mutex::default(),
        }
    }

    /// Stores the slices' values as their units' properties ([`koord_translator::cgroup::systemd`]), after
    /// the files are written.
    pub fn with_systemd(
        mut self,
        units: Option<Arc<koord_translator::cgroup::systemd::Units>>,
    ) -> Self {
        self.systemd = units;
        self
    }

    /// Gives systemd an ancestor's values (the files the applier owns, one call) after they
    /// were written, so that systemd's next re-apply of the unit writes them again. A value
    /// systemd does not take stays as the pass wrote it until that re-apply, which the drift
    /// check then repairs; the systemd metrics count it.
    fn store_on_unit(&self, unit: &UnitWants) {
        let Some(units) = self.systemd.as_ref().filter(|_| !self.writer.dry_run) else {
            return;
        };
        let list: Vec<koord_translator::cgroup::systemd::plan::Want<'_>> = unit
            .wants
            .iter()
            .flatten()
            .map(
                |(file, text, differs)| koord_translator::cgroup::systemd::plan::Want {
                    dir: &unit.dir,
                    file,
                    text,
                    differs: *differs,
                },
            )
            .collect();
        if !list.is_empty() {
            units.store(&list);
        }
    }

    /// The directory of `level` relative to the hierarchy root, from the layout.
    fn rel(&self, level: Level) -> PathBuf {
        match level {
            Level::Qos(qos) => self.layout.qos_parent_dir(qos),
            Level::Kubepods => self.layout.kubepods_dir(),
        }
    }

    /// One pass, bottom-up: `burstable`, `besteffort`, then `kubepods`, whose sum takes the
    /// class directories at the values this pass left in them.
    pub fn reconcile(&self) -> AncestorsReport {
        let mut report = AncestorsReport {
            kubelet_memory_qos: self.kubelet_memory_qos,
            cgroups: Vec::with_capacity(6),
        };
        let mut held_by_class: Vec<(OsString, [Option<Protection>; 2])> = Vec::new();
        let writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        // Children not seen by this pass (deleted pods) drop their files.
        let mut old = std::mem::take(&mut *kept);
        let mut units = Vec::with_capacity(Level::BOTTOM_UP.len());
        for level in Level::BOTTOM_UP {
            let (entries, held, unit) = self.ancestor(level, &held_by_class, &mut old, &mut kept);
            if let Level::Qos(_) = level
                && let Some(name) = self.rel(level).file_name()
            {
                held_by_class.push((name.to_owned(), held));
            }
            report.cgroups.extend(entries);
            units.extend(unit);
        }
        drop(kept);
        *self.left.lock().unwrap_or_else(PoisonError::into_inner) = self.left_by(&report);
        let put_back =
            std::mem::take(&mut *self.put_back.lock().unwrap_or_else(PoisonError::into_inner));
        drop(writing);
        for unit in &mut units {
            for (file, _, differs) in unit.wants.iter_mut().flatten() {
                *differs |= put_back.contains(&unit.dir.join(file));
            }
        }
        // Every file first, then systemd: a repair is in force at once, and a call that waits
        // on a busy systemd (the kubelet restarting) cannot hold the next level's file back.
        for unit in &units {
            self.store_on_unit(unit);
        }
        self.account(&report);
        report
    }

    /// The files `report`'s pass left at the value it decided, and those it read but could not
    /// parse (none in a dry run): the check between passes watches both.
    fn left_by(&self, report: &AncestorsReport) -> Vec<Left> {
        if self.writer.dry_run {
            return Vec::new();
        }
        report
            .cgroups
            .iter()
            .filter(|c| !c.kept_kubelet_value)
            .filter_map(|c| {
                let value = if matches!(c.outcome, Outcome::Written | Outcome::Unchanged) {
                    Some(Protection::parse(c.new.as_deref()?).ok()?)
                } else if c.new.is_none() && Protection::parse(c.old.as_deref()?).is_err() {
                    None
                } else {
                    return None;
                };
                Some(Left {
                    path: c.path.clone(),
                    value,
                })
            })
            .collect()
    }

    /// Puts back at once every file the last pass left at its value that reads otherwise now
    /// (the kubelet's restart writes 0, a daemon-reload re-applies what systemd stores), without
    /// waiting for a pass: the sums were right a moment ago, and the pass the caller then asks
    /// for decides again (and stores the sums through systemd). Returns the first file found
    /// moved, if any. A few small reads when nothing moved.
    pub fn put_back_moved(&self) -> Option<PathBuf> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let left = self.left.lock().unwrap_or_else(PoisonError::into_inner);
        let found = moved(&left, |p| std::fs::read_to_string(p).ok());
        for l in &found {
            let (Some(v), Some(dir), Some(name)) = (
                l.value,
                l.path.parent(),
                l.path.file_name().and_then(|n| n.to_str()),
            ) else {
                continue;
            };
            let cg = CgroupDir::open(Arc::from(dir));
            let r = self
                .writer
                .apply(&cg, name, &v.text(self.layout.version), v.expect());
            if r.outcome == Outcome::Written {
                self.put_back
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(l.path.clone());
            }
        }
        found.first().map(|l| l.path.clone())
    }

    /// One ancestor's two files; also the values they hold afterwards (`None`: no such file) and
    /// what its systemd unit is to store.
    fn ancestor(
        &self,
        level: Level,
        known: &[(OsString, [Option<Protection>; 2])],
        old: &mut HashMap<PathBuf, KeptPair>,
        kept: &mut HashMap<PathBuf, KeptPair>,
    ) -> (
        Vec<AncestorReport>,
        [Option<Protection>; 2],
        Option<UnitWants>,
    ) {
        let rel = self.rel(level);
        let cgroup = rel.display().to_string();
        let dir = match self.layout.dir(&rel, Controller::Memory) {
            Ok(d) => d,
            // The layout's own names never leave the root; kept as a failure, not a panic.
            Err(e) => {
                let entries = ProtectionFile::BOTH.map(|f| AncestorReport {
                    cgroup: cgroup.clone(),
                    level,
                    file: f.name(),
                    path: rel.join(f.name()),
                    children: 0,
                    sum: None,
                    old: None,
                    new: None,
                    outcome: Outcome::Failed,
                    kept_kubelet_value: false,
                    reason: Some(e.to_string()),
                });
                return (entries.to_vec(), [None, None], None);
            }
        };
        let cg = CgroupDir::open(Arc::from(dir.as_path()));
        let current = ProtectionFile::BOTH
            .map(|f| CgroupWriter::read_result(&cg, f.name(), cg.read(f.name())));
        // Children are read only when there is a file to reconcile (not on mainline v1).
        let children = if current.iter().any(Result::is_ok) {
            read_children(&dir, known, old, kept)
        } else {
            Children::none()
        };
        // What each file should hold; the files the applier owns go to systemd after the pass
        // wrote them, in one call per unit (the kubelet's own are left to it).
        let decisions = ProtectionFile::BOTH.map(|file| {
            let i = file as usize;
            let cur = Protection::parse(current[i].as_ref().ok()?).ok()?;
            let values = children.values[i].as_ref().ok()?;
            Some(decide(
                cur,
                values,
                self.kubelet_memory_qos.owns(level, file),
            ))
        });
        let wants = ProtectionFile::BOTH.map(|file| {
            let i = file as usize;
            let d = decisions[i].filter(|d| !d.kubelet_owned)?;
            let old = current[i].as_ref().ok()?;
            Some((
                file.name(),
                d.target.text(self.layout.version),
                !koord_translator::cgroup::readback::matches(d.target.expect(), old),
            ))
        });
        let mut entries = Vec::with_capacity(2);
        let mut held = [None, None];
        for (i, file) in ProtectionFile::BOTH.into_iter().enumerate() {
            let mut entry = AncestorReport {
                cgroup: cgroup.clone(),
                level,
                file: file.name(),
                path: dir.join(file.name()),
                children: children.count,
                sum: None,
                old: None,
                new: None,
                outcome: Outcome::Failed,
                kept_kubelet_value: false,
                reason: None,
            };
            match (&current[i], &children.values[i]) {
                (Err(r), _) => {
                    entry.outcome = r.outcome;
                    entry.reason = r.error.clone();
                }
                (Ok(old), Err(why)) => {
                    entry.old = Some(old.clone());
                    entry.reason = Some(why.clone());
                    held[i] = Protection::parse(old).ok();
                }
                (Ok(old), Ok(values)) => {
                    entry.old = Some(old.clone());
                    match Protection::parse(old) {
                        Err(e) => entry.reason = Some(format!("{}: {e}", entry.path.display())),
                        Ok(cur) => {
                            held[i] = Some(cur);
                            let owned = self.kubelet_memory_qos.owns(level, file);
                            let d = decisions[i].unwrap_or_else(|| decide(cur, values, owned));
                            let text = d.target.text(self.layout.version);
                            let r = self.writer.compare_write(
                                &cg,
                                file.name(),
                                &text,
                                d.target.expect(),
                                old.clone(),
                            );
                            entry.sum = Some(d.sum.to_string());
                            entry.outcome = r.outcome;
                            entry.reason = r.error;
                            if matches!(r.outcome, Outcome::Written | Outcome::Unchanged) {
                                entry.new = Some(text);
                                held[i] = Some(d.target);
                                entry.kept_kubelet_value = d.kubelet_owned;
                                if d.capped_by_kubelet() {
                                    entry.reason = Some(format!(
                                        "the kubelet's value is below the sum of the children ({}): the kernel caps them to it; the file is the kubelet's and is left as it is",
                                        d.sum
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            entries.push(entry);
        }
        let unit = wants
            .iter()
            .any(Option::is_some)
            .then_some(UnitWants { dir, wants });
        (entries, held, unit)
    }

    /// Metrics and logs of a pass.
    fn account(&self, report: &AncestorsReport) {
        for c in &report.cgroups {
            if let Some(m) = &self.metrics {
                m.apply
                    .writes
                    .with_label_values(&[c.file, c.outcome.as_str()])
                    .inc();
                // The value in force: what the pass left, else (a failed write) what it read.
                let in_force = c.new.as_deref().or(c.old.as_deref());
                if let Some(v) = in_force.and_then(|v| Protection::parse(v).ok()) {
                    m.qos_protection
                        .with_label_values(&[c.cgroup.as_str(), c.file])
                        .set(v.as_i64());
                }
                if let Some(v) = c.sum.as_deref().and_then(|v| Protection::parse(v).ok()) {
                    m.qos_children
                        .with_label_values(&[c.cgroup.as_str(), c.file])
                        .set(v.as_i64());
                }
            }
            match c.outcome {
                Outcome::Written => tracing::info!(
                    cgroup = %c.cgroup, file = c.file, old = c.old.as_deref().unwrap_or_default(),
                    new = c.new.as_deref().unwrap_or_default(), children = c.children,
                    dry_run = self.writer.dry_run,
                    "QoS-level memory protection set to the sum of its children"
                ),
                Outcome::Failed => tracing::warn!(
                    cgroup = %c.cgroup, file = c.file,
                    error = c.reason.as_deref().unwrap_or_default(),
                    "QoS-level memory protection not reconciled"
                ),
                Outcome::Unsupported if !self.unsupported_logged.swap(true, Ordering::Relaxed) => {
                    tracing::warn!(
                        cgroup = %c.cgroup, file = c.file,
                        "this kernel has no memory.min/memory.low (mainline cgroup v1): pod memory protection is not available on this node"
                    );
                }
                _ => {}
            }
        }
    }
}

impl Children {
    fn none() -> Self {
        Self {
            count: 0,
            values: [Ok(Vec::new()), Ok(Vec::new())],
        }
    }
}

/// The protection values of the direct children of `dir` (cgroup directories). A child named
/// in `known` (a QoS-class directory this pass already reconciled) counts at the value it now
/// holds. A child without the files (no memory controller below `dir`) or removed while being
/// read claims nothing: 0. Each child's files are taken from `old` (the last pass) or opened,
/// and left in `kept` for the next pass.
fn read_children(
    dir: &Path,
    known: &[(OsString, [Option<Protection>; 2])],
    old: &mut HashMap<PathBuf, KeptPair>,
    kept: &mut HashMap<PathBuf, KeptPair>,
) -> Children {
    let mut out = Children::none();
    let paths = match file::subdirs(dir) {
        Ok(p) => p,
        Err(e) => {
            out.values = [Err(e.to_string()), Err(e.to_string())];
            return out;
        }
    };
    for path in paths {
        out.count += 1;
        if let Some((_, held)) = known
            .iter()
            .find(|(n, _)| Some(n.as_os_str()) == path.file_name())
        {
            for (slot, v) in out.values.iter_mut().zip(held) {
                if let Ok(vals) = slot {
                    vals.push(v.unwrap_or(Protection::ZERO));
                }
            }
            continue;
        }
        let mut files = old.remove(&path).unwrap_or_default();
        let mut child: Option<CgroupDir> = None;
        for ((slot, file), keep) in out
            .values
            .iter_mut()
            .zip(ProtectionFile::BOTH)
            .zip(files.iter_mut())
        {
            let Ok(vals) = slot else { continue };
            match read_kept(&path, &mut child, file, keep) {
                Ok(Some(text)) => match Protection::parse(&text) {
                    Ok(v) => vals.push(v),
                    Err(e) => *slot = Err(format!("{}: {e}", path.join(file.name()).display())),
                },
                Ok(None) => vals.push(Protection::ZERO),
                // A cgroup removed between the listing and the read answers ENODEV.
                Err(e) if Errno::from_io_error(&e) == Some(Errno::NODEV) => {
                    vals.push(Protection::ZERO)
                }
                Err(e) => {
                    *slot = Err(format!("read {}: {e}", path.join(file.name()).display()));
                }
            }
        }
        kept.insert(path, files);
    }
    out
}

/// One child file: one `pread` of the kept fd; a missing, stale or failing one is (re)opened
/// through the child's directory (opened at most once per pass) and kept if the budget allows.
fn read_kept(
    path: &Path,
    child: &mut Option<CgroupDir>,
    file: ProtectionFile,
    keep: &mut Option<KeptKnob>,
) -> std::io::Result<Option<String>> {
    if let Some(k) = keep.as_ref()
        && let Ok(KeptRead::Value(v)) = k.read()
    {
        return Ok(Some(v));
    }
    *keep = None;
    let dir = child.get_or_insert_with(|| CgroupDir::open(Arc::from(path)));
    Ok(dir.open_knob(file.name())?.map(|(k, v)| {
        *keep = k.try_keep();
        v
    }))
}
