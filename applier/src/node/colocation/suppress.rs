//! CPU suppression of BE pods.
//!
//! Pure: [`be_budget_milli`] (Koordinator's `suppress(BE) = node CPUs x threshold% - LS pods'
//! usage - system usage`, floored at `--be-suppress-min-cpus`), [`cpuset_for`] (that many whole
//! CPUs from the end of the list, away from CPUs bound to LS pods), [`quota_for`].
//! IO: [`BeParent`] writes the result to the BE parent cgroup (the layout's BestEffort QoS
//! directory, `kubepods/besteffort` or `kubepods.slice/kubepods-besteffort.slice`), v1 and v2,
//! and lifts it; every read and write goes through `cgroup::file`.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::io::Errno;

use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::{KubeQos, Layout, LayoutError};
use koord_translator::cgroup::readback::Expect;
use koord_translator::cgroup::{CgroupVersion, Controller};

use crate::cpu_list::{format_slice, parse_vec};
use crate::node::writer::{Key, NodeWriter, Owner, Want};

/// Inputs of one suppression round (CPU in milli-cores, usage over the last interval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuppressInput {
    /// Online CPUs of the node x 1000.
    pub node_cpus_milli: i64,
    pub node_used_milli: i64,
    /// All pods (BE included).
    pub pods_used_milli: i64,
    /// Non-BE pods.
    pub ls_used_milli: i64,
    pub threshold_percent: i64,
    /// The floor: BE pods always keep at least this much (clamped to the node).
    pub min_milli: i64,
}

/// The CPU BE pods may use now, in milli-cores, in `[min(floor, node), node]`.
pub fn be_budget_milli(i: &SuppressInput) -> i64 {
    let system = (i.node_used_milli - i.pods_used_milli).max(0);
    let raw = i128::from(i.node_cpus_milli) * i128::from(i.threshold_percent) / 100
        - i128::from(i.ls_used_milli)
        - i128::from(system);
    let floor = i.min_milli.clamp(0, i.node_cpus_milli.max(0));
    let raw = i64::try_from(raw.clamp(i128::from(i64::MIN), i128::from(i64::MAX))).unwrap_or(0);
    raw.max(floor).min(i.node_cpus_milli.max(floor))
}

/// `budget` whole CPUs (rounded up, at least `ceil(floor)`, at least 1), taken from the end of
/// `all`, never from CPUs bound to LS pods (their exclusive cpusets, e.g. the kubelet's static
/// CPU manager) unless nothing else is left; returned sorted.
pub fn cpuset_for(
    budget_milli: i64,
    min_milli: i64,
    all: &[u32],
    ls_bound: &BTreeSet<u32>,
) -> Vec<u32> {
    let free: Vec<u32> = all
        .iter()
        .copied()
        .filter(|c| !ls_bound.contains(c))
        .collect();
    let pool = if free.is_empty() { all } else { &free[..] };
    if pool.is_empty() {
        return Vec::new();
    }
    let want = budget_milli.max(min_milli).max(1);
    let n = usize::try_from((want + 999) / 1000)
        .unwrap_or(usize::MAX)
        .clamp(1, pool.len());
    let mut picked: Vec<u32> = pool.iter().rev().take(n).copied().collect();
    picked.sort_unstable();
    picked
}

/// CFS quota for `budget_milli` with `period_us`, at least the kernel's 1000 µs.
pub fn quota_for(budget_milli: i64, period_us: i64) -> i64 {
    (i128::from(budget_milli) * i128::from(period_us) / 1000)
        .clamp(1000, i128::from(i64::MAX))
        .try_into()
        .unwrap_or(i64::MAX)
}

/// What the BE parent should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// `cfs_quota_us` for the BE parent's period (`-1`/`max` lifts).
    Quota(i64),
    /// `cpuset.cpus`.
    Cpuset(Vec<u32>),
}

/// The BE parent cgroup of this node and how to write it.
#[derive(Debug, Clone)]
pub struct BeParent {
    pub version: CgroupVersion,
    /// v1: `<root>/cpu/<rel>`; v2: `<root>/<rel>`.
    pub cpu_dir: PathBuf,
    /// v1: `<root>/cpuset/<rel>`; v2: same as `cpu_dir`.
    pub cpuset_dir: PathBuf,
    /// Writes the v2 quota and puts the value found back when it is lifted (on the systemd
    /// driver as the slice's `CPUQuotaPerSecUSec` too, so the kubelet's next QoS update does not
    /// lift it).
    pub writer: Arc<NodeWriter>,
}

/// The suppression, as the node writer names the owner of the BE parent's `cpu.max`.
const OWNER: Owner = "BE suppression";

/// All cgroup directories below `dir` (excluding it), parents before children. One removed
/// while walked is left out; any other listing error fails the walk.
fn descendants(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for k in file::subdirs(&d)? {
            out.push(k.clone());
            stack.push(k);
        }
    }
    // The stack walk is depth-first; re-sort so every parent precedes its children.
    out.sort_by_key(|p| p.components().count());
    Ok(out)
}

/// What one apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The value now in the BE parent (file text).
    pub value: String,
    /// Whether anything was written.
    pub changed: bool,
    /// v1 children whose larger CFS quota was lowered to the parent's, with their old value
    /// (restored by [`BeParent::restore_quotas`] once the parent allows it again).
    pub lowered: Vec<(PathBuf, i64)>,
}

impl BeParent {
    /// The BE parent of `layout`: the QoS-class directory of BestEffort pods.
    pub fn new(layout: &Layout) -> Result<Self, LayoutError> {
        let rel = layout.qos_parent_dir(KubeQos::BestEffort);
        Ok(Self {
            version: layout.version,
            cpu_dir: layout.dir(&rel, Controller::Cpu)?,
            cpuset_dir: layout.dir(&rel, Controller::Cpuset)?,
            writer: Arc::default(),
        })
    }

    /// The CFS period of the BE parent (µs), 100000 when it cannot be read.
    pub fn period_us(&self) -> i64 {
        let parsed = match self.version {
            CgroupVersion::V1 => file::read_or_report(&self.cpu_dir.join("cpu.cfs_period_us"))
                .and_then(|s| s.parse().ok()),
            CgroupVersion::V2 => file::read_or_report(&self.cpu_dir.join("cpu.max"))
                .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse().ok())),
        };
        parsed.filter(|p: &i64| *p > 0).unwrap_or(100_000)
    }

    /// Sets the CFS quota (`quota < 0` lifts it). On v1 the kernel refuses a parent quota below
    /// a child's (EINVAL): such children (BE pods with their own batch quota) are first lowered
    /// to the parent's value, deepest first.
    pub fn set_quota(&self, quota: i64) -> io::Result<Applied> {
        match self.version {
            CgroupVersion::V1 => {
                let file = self.cpu_dir.join("cpu.cfs_quota_us");
                let old = file::read_existing(&file)?;
                let want = if quota < 0 {
                    "-1".to_owned()
                } else {
                    quota.to_string()
                };
                if old == want {
                    return Ok(Applied {
                        value: old,
                        changed: false,
                        lowered: Vec::new(),
                    });
                }
                let mut lowered = Vec::new();
                match file::write(&file, &want) {
                    Err(e) if Errno::from_io_error(&e) == Some(Errno::INVAL) && quota >= 0 => {
                        for d in descendants(&self.cpu_dir)?.iter().rev() {
                            let f = d.join("cpu.cfs_quota_us");
                            let child =
                                file::read_or_report(&f).and_then(|s| s.parse::<i64>().ok());
                            if let Some(c) = child.filter(|c| *c > quota) {
                                file::write(&f, &want)?;
                                lowered.push((f, c));
                            }
                        }
                        file::write(&file, &want)?;
                    }
                    r => r?,
                }
                Ok(Applied {
                    value: want,
                    changed: true,
                    lowered,
                })
            }
            CgroupVersion::V2 => {
                let file = self.cpu_dir.join("cpu.max");
                let key = Key {
                    dir: self.cpu_dir.as_path().into(),
                    file: "cpu.max",
                };
                let report = if quota < 0 {
                    self.writer.release(OWNER, key)
                } else {
                    let old = file::read_existing(&file)?;
                    let period = old
                        .split_whitespace()
                        .nth(1)
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(100_000);
                    let want = Want {
                        text: format!("{quota} {period}"),
                        expect: Expect::CpuMax {
                            quota: Some(quota),
                            period,
                        },
                        or_higher: false,
                    };
                    self.writer.hold(OWNER, key, want)
                };
                if report.errors > 0 || report.refused > 0 {
                    return Err(io::Error::other(format!("{}: not written", file.display())));
                }
                Ok(Applied {
                    value: file::read_existing(&file)?,
                    changed: report.written + report.released > 0,
                    lowered: Vec::new(),
                })
            }
        }
    }

    /// Sets `cpuset.cpus` of the BE parent and, on v1, of every cgroup below it (a v1 child must
    /// hold a subset of its parent: narrowing writes children first, widening the parent
    /// first). On v2 the kernel intersects children with the parent by itself.
    pub fn set_cpuset(&self, cpus: &[u32]) -> io::Result<Applied> {
        let want = format_slice(cpus);
        let file = self.cpuset_dir.join("cpuset.cpus");
        let old_text = file::read_existing(&file)?;
        let old = parse_vec(&old_text).unwrap_or_default();
        let kids = match self.version {
            CgroupVersion::V1 => descendants(&self.cpuset_dir)?,
            CgroupVersion::V2 => Vec::new(),
        };
        let kid_files: Vec<PathBuf> = kids.iter().map(|d| d.join("cpuset.cpus")).collect();
        let kids_ok = kid_files.iter().all(|f| {
            file::read_or_report(f)
                .and_then(|s| parse_vec(&s))
                .is_some_and(|c| c == cpus)
        });
        if old == cpus && kids_ok {
            return Ok(Applied {
                value: want,
                changed: false,
                lowered: Vec::new(),
            });
        }
        // Valid for any change (narrowing, widening, or moving to other CPUs): widen the
        // parent and then its subtree top-down to old ∪ new, then narrow bottom-up to new.
        let mut union: Vec<u32> = old.iter().chain(cpus).copied().collect();
        union.sort_unstable();
        union.dedup();
        let union_text = format_slice(&union);
        let write_if = |f: &Path, v: &str| -> io::Result<()> {
            if file::read_existing(f)? != v {
                file::write(f, v)?;
            }
            Ok(())
        };
        if union != old {
            write_if(&file, &union_text)?;
            for f in &kid_files {
                write_if(f, &union_text)?;
            }
        }
        for f in kid_files.iter().rev() {
            write_if(f, &want)?;
        }
        write_if(&file, &want)?;
        Ok(Applied {
            value: want,
            changed: true,
            lowered: Vec::new(),
        })
    }

    /// Gives lowered children (`Applied::lowered`) their own quota back where the parent's
    /// quota (`parent < 0`: unlimited) allows it again; returns the ones still waiting.
    pub fn restore_quotas(&self, lowered: Vec<(PathBuf, i64)>, parent: i64) -> Vec<(PathBuf, i64)> {
        let mut waiting = Vec::new();
        for (f, q) in lowered {
            if parent < 0 || q <= parent {
                // Gone (pod deleted) or refused: nothing more to do for this child.
                let _ = file::write(&f, &q.to_string());
            } else {
                waiting.push((f, q));
            }
        }
        waiting
    }

    /// Applies a limit.
    pub fn apply(&self, limit: &Limit) -> io::Result<Applied> {
        match limit {
            Limit::Quota(q) => self.set_quota(*q),
            Limit::Cpuset(c) => self.set_cpuset(c),
        }
    }
}
