//! The families a pod pass counts ([`crate::pod::apply::Applier`]), registered into the
//! caller's registry: the applier's `/metrics` shows them beside its own. Their names keep the
//! `koord_applier_` prefix (dashboards and alerts know them so), and the node features count
//! their own writes in [`ApplyMetrics::writes`] too.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

#[derive(Clone)]
pub struct ApplyMetrics {
    /// Knob outcomes: `knob` is the file name on this node, `outcome` one of written,
    /// unchanged, unsupported, missing, refused, failed.
    pub writes: IntCounterVec,
    /// Seconds to reconcile one pod (read, compare, write every knob).
    pub reconcile_seconds: Histogram,
    /// 1 for each knob the kernel of this node does not have.
    pub unsupported: IntGaugeVec,
}

impl ApplyMetrics {
    /// The pass's families, registered in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        Ok(Self {
            writes: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_cgroup_writes_total",
                        "Cgroup knob reconciliations by knob and outcome.",
                    ),
                    &["knob", "outcome"],
                ),
            )?,
            reconcile_seconds: register(
                registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "koord_applier_reconcile_duration_seconds",
                        "Time to reconcile one pod's cgroups.",
                    )
                    .buckets(vec![
                        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
                        0.1, 0.5,
                    ]),
                ),
            )?,
            unsupported: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_unsupported_knobs",
                        "Knobs this node's kernel does not have (1 each).",
                    ),
                    &["knob"],
                ),
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_pass_families() {
        let registry = Registry::new();
        let m = ApplyMetrics::register(&registry).expect("metrics");
        m.writes.with_label_values(&["memory.min", "written"]).inc();
        m.reconcile_seconds.observe(0.001);
        m.unsupported
            .with_label_values(&["memory.wmark_ratio"])
            .set(1);
        let text = koord_runtime::metrics::render(&registry);
        for needle in [
            "koord_applier_cgroup_writes_total{knob=\"memory.min\",outcome=\"written\"} 1",
            "koord_applier_reconcile_duration_seconds_count 1",
            "koord_applier_unsupported_knobs{knob=\"memory.wmark_ratio\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        // One registry holds each family once: a second registration is refused.
        assert!(ApplyMetrics::register(&registry).is_err());
    }
}
