//! Prometheus metrics on `/metrics`. Own registry (no process collector: that feature pulls a
//! second procfs); names are prefixed `koord_applier_`.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Knob outcomes: `knob` is the file name on this node, `outcome` one of written,
    /// unchanged, unsupported, missing, refused, failed.
    pub writes: IntCounterVec,
    /// Seconds to reconcile one pod (read, compare, write every knob).
    pub reconcile_seconds: Histogram,
    /// Pods with a resolved-qos annotation currently known on this node.
    pub pods_managed: IntGauge,
    /// 1 for each knob the kernel of this node does not have.
    pub unsupported: IntGaugeVec,
    /// Events by reason and whether they were posted or suppressed as duplicates.
    pub events: IntCounterVec,
    /// 1 when resctrl (L3 CAT or MBA) is usable at `--resctrl-root`, else 0.
    pub resctrl_supported: IntGauge,
    /// resctrl class groups (`koord-LS`, `koord-BE`) created.
    pub resctrl_groups_created: IntCounter,
    /// resctrl `schemata` files written.
    pub resctrl_schemata_writes: IntCounter,
    /// Tasks moved by resctrl reconciles: `added` to a class group, `removed` back to the
    /// default group, `gone` (exited while being moved).
    pub resctrl_tasks: IntCounterVec,
    /// Families that write their own text (the collectors' thousands of per-cgroup series,
    /// kept compact rather than as prometheus metrics), appended by [`Self::render`].
    text_sources: Arc<Mutex<Vec<TextSource>>>,
}

/// Appends text-format families to the exposition.
pub type TextSource = Box<dyn Fn(&mut String) + Send + Sync>;

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        // The metric definitions are constants; registering them in a fresh registry only
        // fails on a programming error (duplicate names), which tests catch.
        let writes = IntCounterVec::new(
            Opts::new(
                "koord_applier_cgroup_writes_total",
                "Cgroup knob reconciliations by knob and outcome.",
            ),
            &["knob", "outcome"],
        )
        .expect("valid metric");
        let reconcile_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "koord_applier_reconcile_duration_seconds",
                "Time to reconcile one pod's cgroups.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5,
            ]),
        )
        .expect("valid metric");
        let pods_managed = IntGauge::new(
            "koord_applier_pods_managed",
            "Pods on this node with a resolved-qos annotation.",
        )
        .expect("valid metric");
        let unsupported = IntGaugeVec::new(
            Opts::new(
                "koord_applier_unsupported_knobs",
                "Knobs this node's kernel does not have (1 each).",
            ),
            &["knob"],
        )
        .expect("valid metric");
        let events = IntCounterVec::new(
            Opts::new(
                "koord_applier_events_total",
                "Pod events by reason and result.",
            ),
            &["reason", "result"],
        )
        .expect("valid metric");
        let resctrl_supported = IntGauge::new(
            "koord_applier_resctrl_supported",
            "1 when resctrl L3 CAT or MBA is usable on this node, else 0.",
        )
        .expect("valid metric");
        let resctrl_groups_created = IntCounter::new(
            "koord_applier_resctrl_groups_created_total",
            "resctrl class groups created.",
        )
        .expect("valid metric");
        let resctrl_schemata_writes = IntCounter::new(
            "koord_applier_resctrl_schemata_writes_total",
            "resctrl schemata files written.",
        )
        .expect("valid metric");
        let resctrl_tasks = IntCounterVec::new(
            Opts::new(
                "koord_applier_resctrl_tasks_moved_total",
                "Tasks moved into (added) or out of (removed) resctrl class groups, or gone.",
            ),
            &["direction"],
        )
        .expect("valid metric");
        for c in [
            Box::new(writes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(resctrl_supported.clone()),
            Box::new(resctrl_groups_created.clone()),
            Box::new(resctrl_schemata_writes.clone()),
            Box::new(resctrl_tasks.clone()),
            Box::new(reconcile_seconds.clone()),
            Box::new(pods_managed.clone()),
            Box::new(unsupported.clone()),
            Box::new(events.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Self {
            registry,
            writes,
            reconcile_seconds,
            pods_managed,
            unsupported,
            events,
            resctrl_supported,
            resctrl_groups_created,
            resctrl_schemata_writes,
            resctrl_tasks,
            text_sources: Arc::default(),
        }
    }

    /// Adds families rendered as text after the registry's.
    pub fn add_text_source(&self, source: TextSource) {
        self.text_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(source);
    }

    /// The registry, for families defined next to their code (the collectors').
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding gathered families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        let mut text = String::from_utf8(buf).unwrap_or_default();
        for source in self
            .text_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            source(&mut text);
        }
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_all_families() {
        let m = Metrics::new();
        m.writes.with_label_values(&["memory.min", "written"]).inc();
        m.reconcile_seconds.observe(0.001);
        m.pods_managed.set(3);
        m.unsupported
            .with_label_values(&["memory.wmark_ratio"])
            .set(1);
        m.events
            .with_label_values(&["MemoryQOSApplied", "posted"])
            .inc();
        m.resctrl_supported.set(0);
        m.resctrl_schemata_writes.inc();
        m.resctrl_tasks.with_label_values(&["added"]).inc_by(2);
        let text = m.render();
        for needle in [
            "koord_applier_cgroup_writes_total{knob=\"memory.min\",outcome=\"written\"} 1",
            "koord_applier_reconcile_duration_seconds_count 1",
            "koord_applier_pods_managed 3",
            "koord_applier_unsupported_knobs{knob=\"memory.wmark_ratio\"} 1",
            "koord_applier_events_total{reason=\"MemoryQOSApplied\",result=\"posted\"} 1",
            "koord_applier_resctrl_supported 0",
            "koord_applier_resctrl_groups_created_total 0",
            "koord_applier_resctrl_schemata_writes_total 1",
            "koord_applier_resctrl_tasks_moved_total{direction=\"added\"} 2",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
