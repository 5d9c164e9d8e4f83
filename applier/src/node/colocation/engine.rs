//! The synchronous core of colocation, usable without an API server: sample usage into the
//! window, build the capacity input, and run one suppression round against the BE parent.
//! The async loop in [`super`] feeds it the pod list; the real-cgroup test feeds it a static one.

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupVersion, Controller};

use super::capacity::{CapacityInput, Resources};
use super::config::{SuppressPolicy, ThresholdStrategy};
use super::pod_facts::PodFacts;
use super::suppress::{self, Applied, BeParent, Limit, SuppressInput};
use super::usage::{self, UsageError};
use super::window::Window;

/// What a sampling pass saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampleReport {
    pub node_ok: bool,
    pub pods_read: usize,
    /// Pods whose cgroup does not exist (starting, or another node's layout).
    pub pods_missing: usize,
    pub errors: Vec<String>,
}

/// One suppression round.
#[derive(Debug, Clone, PartialEq)]
pub struct SuppressRound {
    pub input: SuppressInput,
    /// What BE pods may use, milli-cores.
    pub budget_milli: i64,
    /// BE pods' own usage over the last interval, milli-cores.
    pub be_used_milli: i64,
    /// LS pressure took part of BE's share: budget < node x threshold%.
    pub suppressed: bool,
    pub limit: Limit,
    pub applied: Applied,
}

pub struct Engine {
    layout: Layout,
    proc_root: PathBuf,
    window: Window<String>,
    be_parent: BeParent,
    cpus: Vec<u32>,
    min_milli: i64,
    /// The policy last applied (None: nothing applied, or lifted).
    active: Option<SuppressPolicy>,
    /// Whether the first lift (of a previous run's leftovers) has been done.
    lifted_once: bool,
    /// v1 BE children whose own CFS quota was lowered below the parent's, with their value.
    lowered: Vec<(PathBuf, i64)>,
}

impl Engine {
    /// `min_milli`: the suppression floor in milli-CPUs (`--be-suppress-min-cpus` x 1000).
    pub fn new(layout: Layout, proc_root: &Path, min_milli: i64) -> Result<Self, UsageError> {
        let cpus = usage::online_cpus(proc_root)?;
        Ok(Self {
            be_parent: BeParent::new(&layout)?,
            layout,
            proc_root: proc_root.to_owned(),
            window: Window::new(),
            cpus,
            min_milli: min_milli.max(0),
            active: None,
            lifted_once: false,
            lowered: Vec::new(),
        })
    }

    /// The node writer the BE parent's quota goes through (shared with every feature).
    pub fn with_writer(mut self, writer: std::sync::Arc<crate::node::writer::NodeWriter>) -> Self {
        self.be_parent.writer = writer;
        self
    }

    pub fn be_parent(&self) -> &BeParent {
        &self.be_parent
    }

    pub fn node_cpus(&self) -> &[u32] {
        &self.cpus
    }

    fn pod_rel(&self, p: &PodFacts) -> Option<PathBuf> {
        self.layout.pod_dir(&p.uid, p.kube_qos).ok()
    }

    /// Reads the node and every pod into the window (readings older than `window` drop out).
    pub fn sample(&mut self, now: Instant, pods: &[PodFacts], window: Duration) -> SampleReport {
        let mut rep = SampleReport::default();
        match usage::read_node(&self.proc_root) {
            Ok(r) => {
                self.window.node.push(now, r, window);
                rep.node_ok = true;
            }
            Err(e) => rep.errors.push(e.to_string()),
        }
        let mut live = HashSet::new();
        for p in pods {
            live.insert(p.uid.clone());
            let Some(rel) = self.pod_rel(p) else {
                rep.errors
                    .push(format!("pod {}/{}: invalid UID", p.namespace, p.name));
                continue;
            };
            match usage::read_cgroup(&self.layout, &rel) {
                Ok(r) => {
                    self.window.pod(&p.uid).push(now, r, window);
                    rep.pods_read += 1;
                }
                Err(e) if e.is_not_found() => rep.pods_missing += 1,
                Err(e) => rep
                    .errors
                    .push(format!("pod {}/{}: {e}", p.namespace, p.name)),
            }
        }
        self.window.retain(&live);
        rep
    }

    /// How old the newest node reading is.
    pub fn usage_age(&self, now: Instant) -> Option<Duration> {
        self.window
            .node
            .last_at()
            .map(|t| now.saturating_duration_since(t))
    }

    /// The capacity input over the window; `None` until the node has two readings.
    /// A non-BE pod without two readings yet counts its request as its usage.
    pub fn capacity_input(
        &self,
        allocatable: Resources,
        pods: &[PodFacts],
    ) -> Option<CapacityInput> {
        let node = &self.window.node;
        let node_usage = Resources::new(node.cpu_avg_milli()?, node.memory_avg()?);
        let mut input = CapacityInput {
            allocatable,
            node_usage,
            ..CapacityInput::default()
        };
        for p in pods {
            let series = self.window.pods.get(&p.uid);
            let measured = series.and_then(|s| Some((s.cpu_avg_milli()?, s.memory_avg()?)));
            let used = match (measured, p.be) {
                (Some((c, m)), _) => Resources::new(c, m),
                (None, false) => p.request,
                (None, true) => Resources::ZERO,
            };
            input.pods_usage.cpu_milli += used.cpu_milli;
            input.pods_usage.memory_bytes += used.memory_bytes;
            if !p.be {
                input.non_be_usage.cpu_milli += used.cpu_milli;
                input.non_be_usage.memory_bytes += used.memory_bytes;
                input.non_be_request.cpu_milli += p.request.cpu_milli;
                input.non_be_request.memory_bytes += p.request.memory_bytes;
            }
        }
        Some(input)
    }

    /// The suppression input from the last interval; `None` until two readings exist.
    pub fn suppress_input(
        &self,
        threshold_percent: i64,
        pods: &[PodFacts],
    ) -> Option<(SuppressInput, i64)> {
        let node_used = self.window.node.cpu_recent_milli()?;
        let (mut all, mut ls, mut be) = (0i64, 0i64, 0i64);
        for p in pods {
            let Some(c) = self
                .window
                .pods
                .get(&p.uid)
                .and_then(|s| s.cpu_recent_milli())
            else {
                continue;
            };
            all += c;
            if p.be {
                be += c;
            } else {
                ls += c;
            }
        }
        let n = i64::try_from(self.cpus.len()).unwrap_or(i64::MAX);
        Some((
            SuppressInput {
                node_cpus_milli: n.saturating_mul(1000),
                node_used_milli: node_used,
                pods_used_milli: all,
                ls_used_milli: ls,
                threshold_percent,
                min_milli: self.min_milli,
            },
            be,
        ))
    }

    /// The CPUs BE may have at most: the BE parent's parent's cpuset, else all online CPUs.
    fn all_cpus(&self) -> Vec<u32> {
        let parent = self.be_parent.cpuset_dir.parent().map(Path::to_path_buf);
        let read = |f: &str| {
            parent
                .as_ref()
                .and_then(|p| file::read_or_report(&p.join(f)))
                .and_then(|s| crate::cpu_list::parse_vec(&s))
                .filter(|c| !c.is_empty())
        };
        read("cpuset.cpus")
            .or_else(|| read("cpuset.cpus.effective"))
            .unwrap_or_else(|| self.cpus.clone())
    }

    /// CPUs held by a non-BE pod or container whose cpuset is narrower than the node.
    fn ls_bound(&self, pods: &[PodFacts], all: &[u32]) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        for p in pods.iter().filter(|p| !p.be) {
            let Some(rel) = self.pod_rel(p) else { continue };
            let Ok(dir) = self.layout.dir(&rel, Controller::Cpuset) else {
                continue;
            };
            let mut dirs = vec![dir.clone()];
            dirs.extend(file::subdirs_or_report(&dir));
            for d in dirs {
                let Some(set) = file::read_or_report(&d.join("cpuset.cpus"))
                    .and_then(|s| crate::cpu_list::parse_vec(&s))
                else {
                    continue;
                };
                if !set.is_empty() && set.len() < all.len() {
                    out.extend(set);
                }
            }
        }
        out
    }

    /// Removes any limit from the BE parent: quota unlimited, cpuset = the CPUs of `kubepods`
    /// minus those bound to LS pods. A missing BE parent (no kubelet tree) is not an error.
    pub fn lift(&mut self) -> io::Result<bool> {
        let a = self.lift_quota()?;
        let b = self.lift_cpuset(&[])?;
        self.active = None;
        self.lifted_once = true;
        Ok(a || b)
    }

    fn ignore_missing(r: io::Result<Applied>) -> io::Result<bool> {
        match r {
            Ok(a) => Ok(a.changed),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn lift_quota(&mut self) -> io::Result<bool> {
        let changed = Self::ignore_missing(self.be_parent.set_quota(-1))?;
        self.track_lowered(-1, Vec::new());
        Ok(changed)
    }

    /// Restores lowered children the parent's new quota allows, and remembers newly lowered
    /// ones (with the value they had before we first lowered them).
    fn track_lowered(&mut self, parent_quota: i64, newly: Vec<(PathBuf, i64)>) {
        let waiting = std::mem::take(&mut self.lowered);
        self.lowered = self.be_parent.restore_quotas(waiting, parent_quota);
        for (f, q) in newly {
            if !self.lowered.iter().any(|(p, _)| *p == f) {
                self.lowered.push((f, q));
            }
        }
    }

    /// Only after our own cpuset suppression: the kubelet keeps BE containers on its shared
    /// pool, which a blind "all CPUs" would override.
    fn lift_cpuset(&self, pods: &[PodFacts]) -> io::Result<bool> {
        let all = self.all_cpus();
        let bound = self.ls_bound(pods, &all);
        let free: Vec<u32> = all.iter().copied().filter(|c| !bound.contains(c)).collect();
        let target = if free.is_empty() { all } else { free };
        Self::ignore_missing(self.be_parent.set_cpuset(&target))
    }

    /// Lifts what `policy` set (a quota left by a previous run is lifted at the first round).
    fn lift_policy(&mut self, policy: Option<SuppressPolicy>, pods: &[PodFacts]) -> io::Result<()> {
        match policy {
            Some(SuppressPolicy::Cpuset) => {
                self.lift_cpuset(pods)?;
            }
            Some(SuppressPolicy::CfsQuota) => {
                self.lift_quota()?;
            }
            None => {
                // Start-up: a quota on the BE parent is always ours (the kubelet sets none on
                // QoS cgroups); a BE parent cpuset narrower than the lift target is too.
                self.lift_quota()?;
                let all = self.all_cpus();
                let bound = self.ls_bound(pods, &all);
                let target = all.iter().filter(|c| !bound.contains(c)).count();
                let now = file::read_or_report(&self.be_parent.cpuset_dir.join("cpuset.cpus"))
                    .and_then(|s| crate::cpu_list::parse_vec(&s))
                    .unwrap_or_default();
                if !now.is_empty() && now.len() < target {
                    self.lift_cpuset(pods)?;
                }
            }
        }
        self.active = None;
        self.lifted_once = true;
        Ok(())
    }

    /// One round: with the strategy enabled, compute the budget and write it with the policy
    /// (lifting the other policy's limit when the policy changed); disabled, lift once.
    pub fn suppress(
        &mut self,
        strategy: &ThresholdStrategy,
        pods: &[PodFacts],
    ) -> io::Result<Option<SuppressRound>> {
        if !strategy.enable {
            if self.active.is_some() || !self.lifted_once {
                self.lift_policy(self.active, pods)?;
            }
            return Ok(None);
        }
        let Some((input, be_used)) =
            self.suppress_input(strategy.cpu_suppress_threshold_percent, pods)
        else {
            return Ok(None);
        };
        let budget = suppress::be_budget_milli(&input);
        let share = input.node_cpus_milli * input.threshold_percent / 100;
        if let Some(prev) = self.active.filter(|a| *a != strategy.cpu_suppress_policy) {
            self.lift_policy(Some(prev), pods)?;
        } else if !self.lifted_once {
            self.lift_policy(None, pods)?;
        }
        let limit = match strategy.cpu_suppress_policy {
            SuppressPolicy::CfsQuota => {
                Limit::Quota(suppress::quota_for(budget, self.be_parent.period_us()))
            }
            SuppressPolicy::Cpuset => {
                let all = self.all_cpus();
                let bound = self.ls_bound(pods, &all);
                Limit::Cpuset(suppress::cpuset_for(budget, self.min_milli, &all, &bound))
            }
        };
        let applied = match self.be_parent.apply(&limit) {
            Ok(a) => a,
            // No BE parent cgroup (no kubelet tree yet, or no BE QoS cgroup): nothing to squeeze.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Limit::Quota(q) = limit {
            self.track_lowered(q, applied.lowered.clone());
        }
        self.active = Some(strategy.cpu_suppress_policy);
        Ok(Some(SuppressRound {
            input,
            budget_milli: budget,
            be_used_milli: be_used,
            suppressed: budget < share,
            limit,
            applied,
        }))
    }

    pub fn version(&self) -> CgroupVersion {
        self.layout.version
    }
}
