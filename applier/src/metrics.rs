//! Prometheus metrics on `/metrics`. Own registry (no process collector: that feature pulls a
//! second procfs); names are prefixed `koord_applier_`. The pod pass
//! ([`koord_translator::metrics::ApplyMetrics`]) and the features register their own families
//! in the same registry ([`Metrics::registry`]), all through
//! `koord_runtime::metrics::register`.

use std::sync::{Arc, Mutex, PoisonError};

use koord_runtime::metrics::{MetricError, register};
use koord_translator::metrics::ApplyMetrics;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// What the pod pass counts (knob outcomes, the time per pod, the knobs this kernel
    /// lacks); the node-level passes count their writes in its `writes` too.
    pub apply: ApplyMetrics,
    /// Pods with a resolved-qos annotation currently known on this node.
    pub pods_managed: IntGauge,
    /// `memory.min`/`memory.low` of `kubepods` and the QoS-class directories after the last
    /// pass (bytes; unlimited = i64::MAX), by `cgroup` (relative path) and `file`.
    pub qos_protection: IntGaugeVec,
    /// The sum of the direct children's `memory.min`/`memory.low` that the last pass computed
    /// for the same directories: what `qos_protection` should hold.
    pub qos_children: IntGaugeVec,
    /// Ancestors passes run at once because a file the last pass left had moved (the
    /// kubelet's restart, a daemon-reload), between resyncs.
    pub qos_protection_repairs: IntCounter,
    /// Events by reason and whether they were posted or suppressed as duplicates.
    pub events: IntCounterVec,
    /// 1, labelled with the cgroup version, the kubelet's driver and its `cgroupRoot` as
    /// this applier detected or was told them.
    pub cgroup_layout: IntGaugeVec,
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
    /// The applier's own families in a fresh registry.
    pub fn new() -> Result<Self, MetricError> {
        let registry = Registry::new();
        let r = &registry;
        let counters = |name: &str, help: &str, labels: &[&str]| {
            register(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let m = Self {
            apply: ApplyMetrics::register(r)?,
            pods_managed: register(
                r,
                IntGauge::new(
                    "koord_applier_pods_managed",
                    "Pods on this node with a resolved-qos annotation.",
                ),
            )?,
            qos_protection: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_qos_memory_protection_bytes",
                        "memory.min/memory.low of kubepods and the QoS-class cgroups in force after the last pass (the sum of their children unless a write failed or the kubelet owns the file).",
                    ),
                    &["cgroup", "file"],
                ),
            )?,
            qos_children: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_qos_memory_protection_children_bytes",
                        "The sum of the direct children's memory.min/memory.low for kubepods and the QoS-class cgroups, as the last pass computed it.",
                    ),
                    &["cgroup", "file"],
                ),
            )?,
            qos_protection_repairs: register(
                r,
                IntCounter::new(
                    "koord_applier_qos_memory_protection_repairs_total",
                    "Ancestors passes run between resyncs because a memory.min/memory.low the last pass left on kubepods or a QoS-class cgroup had changed (the kubelet's restart, a daemon-reload).",
                ),
            )?,
            events: counters(
                "koord_applier_events_total",
                "Pod events by reason and result.",
                &["reason", "result"],
            )?,
            cgroup_layout: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_cgroup_layout_info",
                        "The cgroup layout in use (1): cgroup version, kubelet cgroup driver and kubelet cgroupRoot.",
                    ),
                    &["version", "driver", "kubelet_cgroup_root"],
                ),
            )?,
            resctrl_supported: register(
                r,
                IntGauge::new(
                    "koord_applier_resctrl_supported",
                    "1 when resctrl L3 CAT or MBA is usable on this node, else 0.",
                ),
            )?,
            resctrl_groups_created: register(
                r,
                IntCounter::new(
                    "koord_applier_resctrl_groups_created_total",
                    "resctrl class groups created.",
                ),
            )?,
            resctrl_schemata_writes: register(
                r,
                IntCounter::new(
                    "koord_applier_resctrl_schemata_writes_total",
                    "resctrl schemata files written.",
                ),
            )?,
            resctrl_tasks: counters(
                "koord_applier_resctrl_tasks_moved_total",
                "Tasks moved into (added) or out of (removed) resctrl class groups, or gone.",
                &["direction"],
            )?,
            registry,
            text_sources: Arc::new(Mutex::new(vec![Box::new(render_cgroup_read_errors)])),
        };
        // The Events an alert counts exist from the start at 0: a counter that first appears
        // at 1 shows no increase in Prometheus, and the first refusal would go unseen.
        for reason in [
            koord_translator::pod::events::REASON_REFUSED,
            koord_translator::pod::events::REASON_FAILED,
        ] {
            for result in ["posted", "suppressed", "delayed", "error"] {
                m.events.with_label_values(&[reason, result]);
            }
        }
        Ok(m)
    }

    /// Adds families rendered as text after the registry's.
    pub fn add_text_source(&self, source: TextSource) {
        self.text_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(source);
    }

    /// Exposes the layout the passes use (`koord_applier_cgroup_layout_info`).
    pub fn set_cgroup_layout(&self, layout: &koord_translator::cgroup::layout::Layout) {
        self.cgroup_layout
            .with_label_values(&[
                layout.version.to_string().as_str(),
                layout.driver.to_string().as_str(),
                layout.kubelet_root.to_string().as_str(),
            ])
            .set(1);
    }

    /// The registry, for families defined next to their code (the collectors').
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut text = koord_runtime::metrics::render(&self.registry);
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

/// `koord_applier_cgroup_read_errors_total`: the process-wide count kept by `cgroup::file`
/// (its readers have no handle on a registry).
fn render_cgroup_read_errors(out: &mut String) {
    use std::fmt::Write as _;
    let name = "koord_applier_cgroup_read_errors_total";
    let _ = write!(
        out,
        "# HELP {name} Cgroup files and directories that could not be read (an error, not an absent file); the log names the path.\n\
         # TYPE {name} counter\n{name} {}\n",
        koord_translator::cgroup::file::read_errors()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_all_families() {
        let m = Metrics::new().expect("metrics");
        m.apply
            .writes
            .with_label_values(&["memory.min", "written"])
            .inc();
        m.apply.reconcile_seconds.observe(0.001);
        m.pods_managed.set(3);
        m.apply
            .unsupported
            .with_label_values(&["memory.wmark_ratio"])
            .set(1);
        m.events
            .with_label_values(&["MemoryQOSApplied", "posted"])
            .inc();
        m.resctrl_supported.set(0);
        m.set_cgroup_layout(
            &koord_translator::cgroup::layout::Layout::new(
                "/sys/fs/cgroup",
                koord_translator::cgroup::CgroupVersion::V2,
                koord_translator::cgroup::CgroupDriver::Systemd,
            )
            .with_kubelet_root(
                koord_translator::cgroup::kubelet_root::KubeletRoot::parse("/kubelet")
                    .expect("root"),
            ),
        );
        m.resctrl_schemata_writes.inc();
        m.resctrl_tasks.with_label_values(&["added"]).inc_by(2);
        m.qos_protection
            .with_label_values(&["kubepods/burstable", "memory.min"])
            .set(134_217_728);
        m.qos_children
            .with_label_values(&["kubepods/burstable", "memory.min"])
            .set(268_435_456);
        let text = m.render();
        for needle in [
            "koord_applier_cgroup_writes_total{knob=\"memory.min\",outcome=\"written\"} 1",
            "koord_applier_qos_memory_protection_bytes{cgroup=\"kubepods/burstable\",file=\"memory.min\"} 134217728",
            "koord_applier_qos_memory_protection_children_bytes{cgroup=\"kubepods/burstable\",file=\"memory.min\"} 268435456",
            "koord_applier_reconcile_duration_seconds_count 1",
            "koord_applier_pods_managed 3",
            "koord_applier_unsupported_knobs{knob=\"memory.wmark_ratio\"} 1",
            "koord_applier_events_total{reason=\"MemoryQOSApplied\",result=\"posted\"} 1",
            "koord_applier_events_total{reason=\"MemoryQOSRefused\",result=\"posted\"} 0",
            "koord_applier_events_total{reason=\"MemoryQOSFailed\",result=\"error\"} 0",
            "koord_applier_resctrl_supported 0",
            "koord_applier_cgroup_layout_info{driver=\"systemd\",kubelet_cgroup_root=\"/kubelet\",version=\"v2\"} 1",
            "koord_applier_resctrl_groups_created_total 0",
            "koord_applier_resctrl_schemata_writes_total 1",
            "koord_applier_resctrl_tasks_moved_total{direction=\"added\"} 2",
            "# TYPE koord_applier_cgroup_read_errors_total counter\nkoord_applier_cgroup_read_errors_total ",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
