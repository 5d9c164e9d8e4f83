//! The emulation's part in a pod's pass, through the translator's one door
//! ([`ContainerHooks`]): a container whose `memory.high` the BE throttle holds is left to the
//! worker, and after the writes each container whose `memory.wmark_ratio` (ratio > 0) or
//! `memory.wmark_min_adj` (> 0, BE) this kernel lacks is registered here (or taken off).

use std::collections::BTreeSet;

use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::knob_map::{Knob, Value};
use koord_translator::pod::hooks::{ContainerHooks, Emulated};
use koord_translator::pod::plan::{Plan, PlannedWrite, Target};
use koord_translator::pod::report::PodReport;
use koord_translator::pod::spec_view::PodSpecView;

use super::{ASYNC_KNOBS, AsyncReclaim, BE_FIRST_KNOB, EMULATED_BY, Registration};

impl ContainerHooks for AsyncReclaim {
    /// A container `memory.high` the BE throttle holds now ([`super::throttle`]): left to the
    /// worker, which puts the value before back when it releases it. (A throttle a crashed
    /// applier left went back in the start sweep, [`super::release_left_throttles`].)
    fn holds(&self, pod: &PodSpecView, w: &PlannedWrite) -> Option<String> {
        let Target::Container(name) = &w.target else {
            return None;
        };
        (w.knob == Knob::MemoryHigh && self.holds_high(&pod.uid, name)).then(|| {
            "held by the BE-first throttle while the node is short of memory (memory.wmark_min_adj, emulated)"
                .to_owned()
        })
    }

    /// Registers each container whose `memory.wmark_ratio` (ratio > 0) or
    /// `memory.wmark_min_adj` (> 0, BE) this kernel lacks, or takes it off; returns, per
    /// container, the knobs emulated (a negative `memory.wmark_min_adj`, LS, is realized by
    /// BE-first choosing the others: named, not registered). The paths are the plan's, from
    /// the layout.
    fn after_pass(&self, pod: &PodSpecView, plan: &Plan, report: &PodReport) -> Emulated {
        let mut emulated = Emulated::new();
        let settings = self.settings();
        // The value of a knob this kernel lacks, with the write's directory.
        let lacking = |target: &Target, knob: Knob| {
            plan.writes
                .iter()
                .zip(&report.knobs)
                .find(|(w, k)| {
                    &w.target == target && w.knob == knob && k.outcome == Outcome::Unsupported
                })
                .and_then(|(w, _)| match w.value {
                    Value::Int(v) => Some((v, w.dir.clone())),
                    _ => None,
                })
        };
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        for w in &plan.writes {
            let Target::Container(name) = &w.target else {
                continue;
            };
            if !seen.insert(name) {
                continue;
            }
            let ratio = lacking(&w.target, Knob::WmarkRatio).filter(|_| settings.enabled);
            let min_adj = lacking(&w.target, Knob::WmarkMinAdj).filter(|_| settings.be_first);
            let mut knobs = Vec::new();
            if ratio.as_ref().is_some_and(|(r, _)| *r > 0) {
                knobs.extend(ASYNC_KNOBS);
            }
            if min_adj.as_ref().is_some_and(|(a, _)| *a != 0) {
                knobs.push(BE_FIRST_KNOB);
            }
            let ratio_v = ratio.as_ref().map_or(0, |(r, _)| (*r).max(0));
            let adj_v = min_adj.as_ref().map_or(0, |(a, _)| (*a).max(0));
            let dir = ratio.or(min_adj).map(|(_, d)| d);
            match dir {
                Some(dir) if ratio_v > 0 || adj_v > 0 => {
                    let scale = lacking(&w.target, Knob::WmarkScaleFactor).map_or(0, |(v, _)| v);
                    self.set(
                        &pod.uid,
                        name,
                        Registration {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            dir,
                            ratio: ratio_v,
                            scale_factor: scale,
                            min_adj: adj_v,
                        },
                    );
                }
                _ => self.unset(&pod.uid, name),
            }
            if !knobs.is_empty() {
                emulated.insert(name.clone(), knobs);
            }
        }
        emulated
    }

    fn emulated_by(&self) -> &'static str {
        EMULATED_BY
    }

    fn forget(&self, pod_uid: &str) {
        AsyncReclaim::forget(self, pod_uid);
    }
}
