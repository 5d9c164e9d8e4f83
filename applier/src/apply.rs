//! Executes a pod's plan against the node's cgroups: parse, plan, validate, read-compare-write,
//! and account for it (report, metrics, the once-per-node log of unsupported knobs).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use koord_api::{ResolvedQos, knobs};

use crate::cgroup::layout::Layout;
use crate::cgroup::writer::{CgroupDir, CgroupWriter, Outcome, WriteResult, read_knob};
use crate::metrics::Metrics;
use crate::plan::{self, Plan, PlannedWrite};
use crate::podview::PodView;
use crate::report::{KnobPath, KnobReport, PodReport, PodStatus};

/// Applies resolved-qos annotations to the cgroups of one node.
pub struct Applier {
    layout: Layout,
    writer: CgroupWriter,
    /// Files this kernel does not have (learned from the first cgroup that lacked them).
    unsupported: Mutex<BTreeSet<&'static str>>,
    metrics: Option<Arc<Metrics>>,
}

fn einval() -> i32 {
    rustix::io::Errno::INVAL.raw_os_error()
}

impl Applier {
    pub fn new(layout: Layout, dry_run: bool, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            layout,
            writer: CgroupWriter::new(dry_run),
            unsupported: Mutex::default(),
            metrics,
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn metrics(&self) -> Option<&Metrics> {
        self.metrics.as_deref()
    }

    /// The knobs found missing on this node so far, sorted.
    pub fn unsupported_knobs(&self) -> Vec<&'static str> {
        self.unsupported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    fn report(&self, pod: &PodView, status: PodStatus, reason: Option<String>) -> PodReport {
        PodReport {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            cgroup_version: self.layout.version,
            cgroup_driver: self.layout.driver,
            dry_run: self.writer.dry_run,
            status,
            reason,
            knobs: Vec::new(),
            read_back: Default::default(),
            pending: Vec::new(),
            locality: None,
        }
    }

    /// One pass over many pods, spread over the CPUs (a resync on a full node).
    pub fn apply_all(&self, pods: &[PodView]) -> Vec<PodReport> {
        par_map(pods, |p| self.apply(p))
    }

    /// One pass over one pod.
    pub fn apply(&self, pod: &PodView) -> PodReport {
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

    fn apply_inner(&self, pod: &PodView) -> PodReport {
        let Some(raw) = pod.resolved_qos.as_deref() else {
            return self.report(pod, PodStatus::Unmanaged, None);
        };
        let resolved = match ResolvedQos::from_annotation(raw) {
            Ok(q) => q,
            Err(e) => return self.report(pod, PodStatus::Refused, Some(e.to_string())),
        };
        let plan = match plan::build(&resolved, pod, &self.layout) {
            Ok(p) => p,
            Err(refused) => return self.report(pod, PodStatus::Refused, Some(refused.reason)),
        };
        if let Err(refused) = plan::validate(&resolved, pod) {
            let mut report = self.report(pod, PodStatus::Refused, Some(refused.reason.clone()));
            report.knobs = plan
                .writes
                .into_iter()
                .map(|w| {
                    knob_report(
                        w,
                        None,
                        Outcome::Refused,
                        Some(Cow::Owned(refused.reason.clone())),
                    )
                })
                .collect();
            return report;
        }
        self.execute(pod, plan)
    }

    fn execute(&self, pod: &PodView, plan: Plan) -> PodReport {
        let mut dirs = DirCache::default();
        let mut results: Vec<WriteResult> = plan
            .writes
            .iter()
            .map(|w| self.write(&mut dirs, w))
            .collect();
        // cgroup v1 refuses a child CFS quota above its parent's (EINVAL) and the order that
        // works depends on whether values grow or shrink: retry those once, after the others.
        for (w, r) in plan.writes.iter().zip(results.iter_mut()) {
            if r.outcome == Outcome::Failed && r.errno == Some(einval()) {
                *r = self.write(&mut dirs, w);
            }
        }
        let mut report = self.report(pod, PodStatus::Unchanged, None);
        report.pending = plan.pending;
        report.knobs = plan
            .writes
            .into_iter()
            .zip(results)
            .map(|(w, r)| {
                let reason = match r.outcome {
                    Outcome::Unsupported => Some(Cow::Borrowed("not supported by this kernel")),
                    _ => r.error.map(Cow::Owned),
                };
                knob_report(w, r.old, r.outcome, reason)
            })
            .collect();
        for (container, path) in plan.wmark_high {
            if let Ok(Some(v)) = read_knob(&path) {
                report
                    .read_back
                    .entry(container)
                    .or_default()
                    .insert(knobs::MEMORY_WMARK_HIGH, v);
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

    fn write(&self, dirs: &mut DirCache, w: &PlannedWrite) -> WriteResult {
        if self
            .unsupported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(w.file)
        {
            return WriteResult {
                outcome: Outcome::Unsupported,
                old: None,
                error: None,
                errno: None,
            };
        }
        let r = self
            .writer
            .apply(dirs.get(&w.dir), w.file, &w.text, w.expect);
        if r.outcome == Outcome::Unsupported {
            let first = self
                .unsupported
                .lock()
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
        r
    }
}

fn knob_report(
    w: PlannedWrite,
    old: Option<String>,
    outcome: Outcome,
    reason: Option<Cow<'static, str>>,
) -> KnobReport {
    KnobReport {
        target: w.target,
        knob: w.knob.name(),
        file: w.file,
        path: KnobPath {
            dir: w.dir,
            file: w.file,
        },
        old,
        new: w.text,
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
