//! Executes a pod's plan against the node's cgroups: parse, plan, validate, read-compare-write,
//! and account for it (report, metrics, the once-per-node log of unsupported knobs).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use koord_api::{ResolvedQos, knobs};

use crate::cgroup::file;
use crate::cgroup::layout::Layout;
use crate::cgroup::readback::matches;
use crate::cgroup::writer::{CgroupDir, CgroupWriter, KeptKnob, KeptRead, WriteResult};
use crate::cgroup::{CgroupVersion, Outcome};
use crate::metrics::ApplyMetrics;
use crate::pod::hooks::ContainerHooks;
use crate::pod::plan::{self, Plan, PlannedWrite};
use crate::pod::report::{KnobPath, KnobReport, PodReport, PodStatus};
use crate::pod::spec_view::PodSpecView;

/// Applies resolved-qos annotations to the cgroups of one node.
pub struct Applier {
    layout: Layout,
    writer: CgroupWriter,
    /// Files this kernel does not have (learned from the first cgroup that lacked them).
    unsupported: RwLock<BTreeSet<&'static str>>,
    metrics: Option<ApplyMetrics>,
    /// CPU QoS capabilities of this node (group identity or the `cpu.idle` fallback).
    caps: plan::NodeCaps,
    /// Per pod UID: the pod as last seen, what parse + validate + build made of it, and the
    /// knob files kept open between passes. A resync of an unchanged pod skips the pure part
    /// and re-reads each knob with one `pread` (the files are still read every pass, so a
    /// value changed behind our back is restored).
    pods: Mutex<HashMap<String, Arc<Mutex<PodState>>>>,
    last_sweep: Mutex<Instant>,
    /// The kernel has no read-only `memory.wmark_high` (mainline): stop looking for it.
    no_wmark_high: AtomicBool,
    /// On the systemd driver: the values of its units are set through systemd first.
    systemd: Option<Arc<crate::cgroup::systemd::Units>>,
    /// The node feature that takes part in the passes ([`crate::pod::hooks`]): it may hold a
    /// container's knob and realize the knobs this kernel lacks.
    hooks: Option<Arc<dyn ContainerHooks>>,
}

/// Cached pods not applied for this long are dropped (a deleted pod the watch did not report;
/// [`Applier::forget`] is the prompt way).
const POD_STATE_TTL: Duration = Duration::from_secs(30 * 60);

/// What parse + build + validate made of one version of a pod.
enum Prepared {
    Refused(String),
    /// Refused by validation: every planned write is reported `refused`.
    RefusedPlan(Plan, String),
    Ready(Plan),
    /// Does not fit the resized pod yet ([`plan::resize_hold`]): the plan that passed before
    /// this version of the pod, when its cgroups are still the same, keeps being executed.
    Held(Option<Plan>, String),
}

struct PodState {
    view: Option<PodSpecView>,
    prepared: Prepared,
    /// One slot per `Plan::writes` entry.
    kept: Vec<Option<KeptKnob>>,
    /// A complete pass (every container started, every cgroup there) was made for this
    /// version of the pod.
    passed: bool,
    last_used: Instant,
}

/// The plan of the previous version of a pod when that version passed (or was itself held
/// with a plan) with the same annotation and the same containers: the "last good values" an
/// in-place resize keeps until the annotation follows. `None` when the annotation or a
/// container ID changed (other cgroups, or a new decision to judge on its own).
fn last_good_plan(
    before: Option<&PodSpecView>,
    prepared: Prepared,
    now: &PodSpecView,
) -> Option<Plan> {
    let before = before?;
    let same_cgroups = before.kube_qos == now.kube_qos
        && before.containers.len() == now.containers.len()
        && before
            .containers
            .iter()
            .zip(&now.containers)
            .all(|(a, b)| a.name == b.name && a.container_id == b.container_id);
    if before.resolved_qos != now.resolved_qos || !same_cgroups {
        return None;
    }
    match prepared {
        Prepared::Ready(plan) | Prepared::Held(Some(plan), _) => Some(plan),
        _ => None,
    }
}

fn einval() -> i32 {
    rustix::io::Errno::INVAL.raw_os_error()
}

impl Applier {
    pub fn new(layout: Layout, dry_run: bool, metrics: Option<ApplyMetrics>) -> Self {
        Self {
            layout,
            writer: CgroupWriter::new(dry_run),
            unsupported: RwLock::default(),
            metrics,
            caps: plan::NodeCaps::default(),
            pods: Mutex::default(),
            last_sweep: Mutex::new(Instant::now()),
            no_wmark_high: AtomicBool::new(false),
            systemd: None,
            hooks: None,
        }
    }

    /// Lets a node feature take part in the passes ([`ContainerHooks`]).
    pub fn with_hooks(mut self, hooks: Option<Arc<dyn ContainerHooks>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Sets the values of systemd units through systemd ([`crate::cgroup::systemd`]) before reading
    /// their files back.
    pub fn with_systemd(mut self, units: Option<Arc<crate::cgroup::systemd::Units>>) -> Self {
        self.systemd = units;
        self
    }

    /// Drops what is cached for a pod (its plan and its open knob files): the pod was deleted.
    pub fn forget(&self, uid: &str) {
        self.pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        if let Some(h) = &self.hooks {
            h.forget(uid);
        }
    }

    /// How many pods have a cached plan.
    pub fn cached_pods(&self) -> usize {
        self.pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn is_unsupported(&self, file: &str) -> bool {
        self.unsupported
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(file)
    }

    /// The pod's cached state, prepared again when the pod changed in any way (annotation,
    /// resources, container IDs, QoS class).
    fn state_for(&self, pod: &PodSpecView) -> Arc<Mutex<PodState>> {
        self.sweep();
        let entry = {
            let mut map = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
            match map.get(&pod.uid) {
                Some(e) => e.clone(),
                None => {
                    let e = Arc::new(Mutex::new(PodState {
                        view: None,
                        prepared: Prepared::Refused(String::new()),
                        kept: Vec::new(),
                        passed: false,
                        last_used: Instant::now(),
                    }));
                    map.insert(pod.uid.clone(), e.clone());
                    e
                }
            }
        };
        {
            let mut guard = entry.lock().unwrap_or_else(PoisonError::into_inner);
            let st = &mut *guard;
            st.last_used = Instant::now();
            if st.view.as_ref() != Some(pod) {
                let previous =
                    std::mem::replace(&mut st.prepared, Prepared::Refused(String::new()));
                let last_good = last_good_plan(st.view.as_ref(), previous, pod);
                let matched_before = last_good.is_some();
                st.prepared = self.prepare(pod, matched_before);
                if let Prepared::Held(held, _) = &mut st.prepared {
                    // The same cgroups as before: the open files stay valid.
                    *held = last_good;
                }
                let old_kept = std::mem::take(&mut st.kept);
                st.kept = match &st.prepared {
                    Prepared::Held(Some(plan), _) if old_kept.len() == plan.writes.len() => {
                        old_kept
                    }
                    Prepared::Held(Some(plan), _) => plan.writes.iter().map(|_| None).collect(),
                    // New container IDs mean new directories: never reuse the old files.
                    Prepared::Ready(plan) => plan.writes.iter().map(|_| None).collect(),
                    _ => Vec::new(),
                };
                st.passed = false;
                st.view = Some(pod.clone());
            }
        }
        entry
    }

    fn sweep(&self) {
        let mut last = self
            .last_sweep
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.elapsed() < POD_STATE_TTL / 2 {
            return;
        }
        *last = Instant::now();
        drop(last);
        self.pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, e| {
                e.try_lock()
                    .map_or(true, |st| st.last_used.elapsed() < POD_STATE_TTL)
            });
    }

    fn prepare(&self, pod: &PodSpecView, matched_before: bool) -> Prepared {
        let raw = pod.resolved_qos.as_deref().unwrap_or_default();
        let resolved = match ResolvedQos::from_annotation(raw) {
            Ok(q) => q,
            Err(e) => return Prepared::Refused(e.to_string()),
        };
        let plan = match plan::build(&resolved, pod, &self.layout, self.caps) {
            Ok(p) => p,
            Err(refused) => return Prepared::Refused(refused.reason),
        };
        match plan::validate(&resolved, pod) {
            Ok(()) => Prepared::Ready(plan),
            Err(refused) => match plan::resize_hold(&resolved, pod, &refused, matched_before) {
                Some(reason) => Prepared::Held(None, reason),
                None => Prepared::RefusedPlan(plan, refused.reason),
            },
        }
    }

    /// Sets the node's CPU QoS capabilities (detected once at start).
    pub fn with_caps(mut self, caps: plan::NodeCaps) -> Self {
        self.caps = caps;
        self
    }

    pub fn caps(&self) -> plan::NodeCaps {
        self.caps
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The knobs found missing on this node so far, sorted.
    pub fn unsupported_knobs(&self) -> Vec<&'static str> {
        self.unsupported
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    fn report(&self, pod: &PodSpecView, status: PodStatus, reason: Option<String>) -> PodReport {
        PodReport {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            cgroup_version: self.layout.version,
            cgroup_driver: self.layout.driver,
            kubelet_cgroup_root: self.layout.kubelet_root.to_string(),
            dry_run: self.writer.dry_run,
            status,
            reason,
            knobs: Vec::new(),
            read_back: Default::default(),
            pending: Vec::new(),
            sidecars: pod
                .containers
                .iter()
                .filter(|c| c.sidecar)
                .map(|c| c.name.clone())
                .collect(),
            pod_level_resources: pod.pod_level.request.is_some() || pod.pod_level.limit.is_some(),
            first_pass: false,
            set_at_creation: false,
            emulated: Default::default(),
            emulated_by: "",
        }
    }

    /// One pass over many pods, spread over the CPUs (a resync on a full node).
    pub fn apply_all(&self, pods: &[PodSpecView]) -> Vec<PodReport> {
        par_map(pods, |p| self.apply(p))
    }

    /// One pass over one pod.
    pub fn apply(&self, pod: &PodSpecView) -> PodReport {
        let started = Instant::now();
        let report = self.apply_inner(pod);
        if let Some(m) = &self.metrics {
            m.reconcile_seconds.observe(started.elapsed().as_secs_f64());
            for k in &report.knobs {
                m.writes
                    .with_label_values(&[k.file, k.outcome.as_str()])
                    .inc();
            }
        }
        report
    }

    fn apply_inner(&self, pod: &PodSpecView) -> PodReport {
        if pod.resolved_qos.is_none() {
            return self.report(pod, PodStatus::Unmanaged, None);
        }
        let entry = self.state_for(pod);
        let mut guard = entry.lock().unwrap_or_else(PoisonError::into_inner);
        let st = &mut *guard;
        match &st.prepared {
            Prepared::Refused(reason) => self.report(pod, PodStatus::Refused, Some(reason.clone())),
            Prepared::RefusedPlan(plan, reason) => {
                let mut report = self.report(pod, PodStatus::Refused, Some(reason.clone()));
                report.knobs = plan
                    .writes
                    .iter()
                    .map(|w| {
                        knob_report(w, None, Outcome::Refused, Some(Cow::Owned(reason.clone())))
                    })
                    .collect();
                report
            }
            Prepared::Held(held, reason) => {
                let mut report = match held {
                    Some(plan) => self.execute(pod, plan, &mut st.kept),
                    None => self.report(pod, PodStatus::Unchanged, None),
                };
                if report.status != PodStatus::Failed {
                    report.status = PodStatus::Held;
                    report.reason = Some(reason.clone());
                }
                report
            }
            Prepared::Ready(plan) => {
                let mut report = self.execute(pod, plan, &mut st.kept);
                if !st.passed && report.pending.is_empty() && report.count(Outcome::Missing) == 0 {
                    st.passed = true;
                    report.first_pass = true;
                }
                report
            }
        }
    }

    fn execute(&self, pod: &PodSpecView, plan: &Plan, kept: &mut [Option<KeptKnob>]) -> PodReport {
        let mut dirs = DirCache::default();
        let reads: Vec<Result<String, WriteResult>> = plan
            .writes
            .iter()
            .zip(kept.iter_mut())
            .map(|(w, k)| match self.held_by_feature(pod, w) {
                Some(held) => Err(held),
                None => self.read(&mut dirs, w, k),
            })
            .collect();
        // systemd units first, all of a unit's values in one call; then every file is read
        // back and what still differs is written.
        let held = self.store_on_units(&plan.writes, &reads);
        let mut results: Vec<WriteResult> = plan
            .writes
            .iter()
            .zip(reads)
            .zip(held)
            .zip(kept.iter_mut())
            .map(|(((w, read), held), k)| {
                let r = match read {
                    Ok(old) => self.finish(&mut dirs, w, old, held),
                    Err(r) => r,
                };
                self.note_unsupported(w, &r, k);
                r
            })
            .collect();
        // cgroup v1 refuses a child CFS quota above its parent's (EINVAL) and the order that
        // works depends on whether values grow or shrink: retry those once, after the others.
        for ((w, r), k) in plan
            .writes
            .iter()
            .zip(results.iter_mut())
            .zip(kept.iter_mut())
        {
            if r.outcome == Outcome::Failed && r.errno == Some(einval()) {
                *r = self.write(&mut dirs, w, k);
            }
        }
        // Still refused: an ancestor's lower quota (BE suppression) holds it; not a failure.
        for (w, r) in plan.writes.iter().zip(results.iter_mut()) {
            if r.outcome == Outcome::Failed
                && r.errno == Some(einval())
                && let Some(reason) = self.held_by_ancestor(w)
            {
                r.outcome = Outcome::Held;
                r.error = Some(reason);
            }
        }
        let mut report = self.report(pod, PodStatus::Unchanged, None);
        report.pending = plan.pending.clone();
        report.knobs = plan
            .writes
            .iter()
            .zip(results)
            .map(|(w, r)| {
                let reason = match r.outcome {
                    Outcome::Unsupported => Some(Cow::Borrowed("not supported by this kernel")),
                    _ => r.error.map(Cow::Owned),
                };
                knob_report(w, r.old, r.outcome, reason)
            })
            .collect();
        if let Some(hooks) = &self.hooks {
            report.emulated = hooks.after_pass(pod, plan, &report);
            report.emulated_by = hooks.emulated_by();
        }
        if !plan.wmark_high.is_empty() && !self.no_wmark_high.load(Ordering::Relaxed) {
            for (container, path) in &plan.wmark_high {
                match file::or_report(path, file::read(path)) {
                    Some(Some(v)) => {
                        report
                            .read_back
                            .entry(container.clone())
                            .or_default()
                            .insert(knobs::MEMORY_WMARK_HIGH, v);
                    }
                    // The cgroup exists but the kernel has no such file: not on this node.
                    Some(None) if path.parent().is_some_and(Path::is_dir) => {
                        self.no_wmark_high.store(true, Ordering::Relaxed);
                        break;
                    }
                    // The container's cgroup is gone, or the file unreadable (reported).
                    _ => {}
                }
            }
        }
        let failed: Vec<String> = report
            .knobs
            .iter()
            .filter(|k| k.outcome == Outcome::Failed)
            .filter_map(|k| k.reason.as_deref().map(str::to_owned))
            .collect();
        if !failed.is_empty() {
            report.status = PodStatus::Failed;
            report.reason = Some(failed.join("; "));
        } else if report.count(Outcome::Written) > 0 {
            report.status = PodStatus::Applied;
        }
        report
    }

    /// A knob a node feature holds now ([`ContainerHooks::holds`]): left to the feature, which
    /// puts the value before back when it lets go; the next pass then compares it with the
    /// annotation's as usual.
    fn held_by_feature(&self, pod: &PodSpecView, w: &PlannedWrite) -> Option<WriteResult> {
        let reason = self.hooks.as_ref()?.holds(pod, w)?;
        Some(WriteResult {
            outcome: Outcome::Held,
            old: None,
            error: Some(reason),
            errno: None,
        })
    }

    /// For a CFS quota the kernel refused (`EINVAL`): the nearest ancestor cgroup (up to the
    /// hierarchy root) that sets a quota, when its CPU share (quota / period) is below the one
    /// we want. cgroup v1 refuses a child quota above its parent's; the BE suppression of
    /// colocation lowers the BE parent (and any larger child quota under it) to exactly that.
    fn held_by_ancestor(&self, w: &PlannedWrite) -> Option<String> {
        let (want, period) = match (self.layout.version, w.file) {
            (CgroupVersion::V1, "cpu.cfs_quota_us") => {
                let want: i64 = w.text.trim().parse().ok()?;
                let period = read_i64(&w.dir.join("cpu.cfs_period_us")).unwrap_or(100_000);
                (want, period)
            }
            (CgroupVersion::V2, "cpu.max") => parse_cpu_max(&w.text)?,
            _ => return None,
        };
        if want < 0 || period <= 0 {
            return None;
        }
        let top = match self.layout.version {
            CgroupVersion::V1 => self.layout.root.join("cpu"),
            CgroupVersion::V2 => self.layout.root.clone(),
        };
        let mut dir = w.dir.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&top) && *d != top) {
            let (quota, p_period) = match self.layout.version {
                CgroupVersion::V1 => (
                    read_i64(&d.join("cpu.cfs_quota_us"))?,
                    read_i64(&d.join("cpu.cfs_period_us")).unwrap_or(100_000),
                ),
                CgroupVersion::V2 => {
                    let text = file::read_or_report(&d.join("cpu.max"))?;
                    parse_cpu_max(&text)?
                }
            };
            if quota >= 0 && p_period > 0 {
                // want / period > quota / p_period, without rounding.
                let above = i128::from(want) * i128::from(p_period)
                    > i128::from(quota) * i128::from(period);
                return above.then(|| {
                    format!(
                        "held by the parent quota: {} is {quota}/{p_period} us, below {want}/{period} us; written when the parent allows it",
                        d.display()
                    )
                });
            }
            dir = d.parent();
        }
        None
    }

    fn write(
        &self,
        dirs: &mut DirCache,
        w: &PlannedWrite,
        kept: &mut Option<KeptKnob>,
    ) -> WriteResult {
        let r = match self.read(dirs, w, kept) {
            Ok(old) => self.finish(dirs, w, old, false),
            Err(r) => r,
        };
        self.note_unsupported(w, &r, kept);
        r
    }

    /// The knob's current value (a kept file re-read with one `pread`; a stale or failing one
    /// is dropped and reopened), or the result that ends it (unsupported, missing, failed).
    fn read(
        &self,
        dirs: &mut DirCache,
        w: &PlannedWrite,
        kept: &mut Option<KeptKnob>,
    ) -> Result<String, WriteResult> {
        if self.is_unsupported(w.file) {
            *kept = None;
            return Err(WriteResult {
                outcome: Outcome::Unsupported,
                old: None,
                error: None,
                errno: None,
            });
        }
        let cached = match kept.as_ref().map(KeptKnob::read) {
            Some(Ok(KeptRead::Value(v))) => Some(v),
            Some(_) => {
                *kept = None;
                None
            }
            None => None,
        };
        match cached {
            Some(v) => Ok(v),
            None => {
                let dir = dirs.get(&w.dir);
                let read = dir.open_knob(w.file).map(|o| {
                    o.map(|(k, v)| {
                        *kept = k.try_keep();
                        v
                    })
                });
                CgroupWriter::read_result(dir, w.file, read)
            }
        }
    }

    /// Compares `old` and writes what differs. `held`: systemd was just given the value (see
    /// [`Self::store_on_units`]): the file is read back and written only if it still differs.
    fn finish(
        &self,
        dirs: &mut DirCache,
        w: &PlannedWrite,
        old: String,
        held: bool,
    ) -> WriteResult {
        if matches(w.expect, &old) {
            // The common resync case: no directory to open, nothing to write.
            return WriteResult {
                outcome: Outcome::Unchanged,
                old: Some(old),
                error: None,
                errno: None,
            };
        }
        self.writer
            .compare_write_held(dirs.get(&w.dir), w.file, &w.text, w.expect, old, held)
    }

    /// Gives systemd the values of the knobs on its units (one call per unit, every value of
    /// ours on it, see [`crate::cgroup::systemd::plan`]); for each write, whether systemd took it.
    /// All `false` off the systemd driver, in a dry run, or while systemd is unreachable.
    fn store_on_units(
        &self,
        writes: &[PlannedWrite],
        reads: &[Result<String, WriteResult>],
    ) -> Vec<bool> {
        let mut held = vec![false; writes.len()];
        let Some(units) = self.systemd.as_ref().filter(|_| !self.writer.dry_run) else {
            return held;
        };
        let (idx, wants): (Vec<usize>, Vec<crate::cgroup::systemd::plan::Want<'_>>) = writes
            .iter()
            .zip(reads)
            .enumerate()
            .filter_map(|(i, (w, r))| {
                let old = r.as_ref().ok()?;
                Some((
                    i,
                    crate::cgroup::systemd::plan::Want {
                        dir: &w.dir,
                        file: w.file,
                        text: &w.text,
                        differs: !matches(w.expect, old),
                    },
                ))
            })
            .unzip();
        for (i, h) in idx.into_iter().zip(units.store(&wants)) {
            held[i] = h;
        }
        held
    }

    /// A knob this kernel lacks: its kept file dropped, logged and shown once per node.
    fn note_unsupported(&self, w: &PlannedWrite, r: &WriteResult, kept: &mut Option<KeptKnob>) {
        if r.outcome != Outcome::Unsupported {
            return;
        }
        *kept = None;
        let first = self
            .unsupported
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(w.file);
        if first {
            // Logged once per node: the kernel will not grow the file while we run.
            tracing::warn!(knob = w.file, dir = %w.dir.display(), "cgroup knob not supported by this kernel; skipping it on this node");
            if let Some(m) = &self.metrics {
                m.unsupported.with_label_values(&[w.file]).set(1);
            }
        }
    }
}

fn read_i64(p: &Path) -> Option<i64> {
    file::read_or_report(p)?.parse().ok()
}

/// `cpu.max` text -> (quota, period); `max` is -1.
fn parse_cpu_max(text: &str) -> Option<(i64, i64)> {
    let mut it = text.split_whitespace();
    let quota = match it.next()? {
        "max" => -1,
        q => q.parse().ok()?,
    };
    let period = it.next().map_or(Some(100_000), |p| p.parse().ok())?;
    Some((quota, period))
}

fn knob_report(
    w: &PlannedWrite,
    old: Option<String>,
    outcome: Outcome,
    reason: Option<Cow<'static, str>>,
) -> KnobReport {
    KnobReport {
        target: w.target.clone(),
        knob: w.knob.name(),
        file: w.file,
        path: KnobPath {
            dir: w.dir.clone(),
            file: w.file,
        },
        old,
        new: w.text.clone(),
        outcome,
        reason,
    }
}

/// The cgroup directories of one pod, each opened once per pass.
#[derive(Default)]
struct DirCache(Vec<CgroupDir>);

impl DirCache {
    fn get(&mut self, dir: &Arc<std::path::Path>) -> &CgroupDir {
        let i = match self.0.iter().position(|d| Arc::ptr_eq(d.path(), dir)) {
            Some(i) => i,
            None => {
                self.0.push(CgroupDir::open(dir.clone()));
                self.0.len() - 1
            }
        };
        &self.0[i]
    }
}

/// `items.iter().map(f)` on up to 4 threads, in order. Small inputs stay on the caller's thread:
/// spawning costs more than a few pods' worth of file IO.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    const MIN_PER_THREAD: usize = 32;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
        .min(items.len() / MIN_PER_THREAD);
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(move || c.iter().map(f).collect::<Vec<R>>()))
            .collect();
        // A panic in `f` is a bug; re-raise it on the caller's thread.
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn par_map_keeps_order() {
        let v: Vec<usize> = (0..1000).collect();
        assert_eq!(
            super::par_map(&v, |x| x * 2),
            v.iter().map(|x| x * 2).collect::<Vec<_>>()
        );
        assert_eq!(super::par_map(&v[..3], |x| x + 1), vec![1, 2, 3]);
    }
}
