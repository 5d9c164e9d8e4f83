//! The collectors' health gauges, registered in the applier's registry (the per-cgroup series
//! are rendered as text by [`super::exposition`]).

use koord_runtime::metrics::{MetricError, register};
use prometheus::{IntGauge, Registry};

pub const CPI_SUPPORTED: &str = "koord_applier_cpi_collector_supported";
pub const PSI_UNAVAILABLE: &str = "koord_applier_psi_unavailable_cgroups";

/// The collectors' health gauges. Cheap to clone (handles to shared state).
#[derive(Clone)]
pub struct CollectorMetrics {
    /// 1 when hardware counters can be opened, 0 when not (no PMU, no permission); absent
    /// while the CPI collector is off.
    pub cpi_supported: IntGauge,
    /// Pod and container cgroups whose pressure files could not be read in the last round.
    pub psi_unavailable: IntGauge,
}

impl CollectorMetrics {
    /// Builds the gauges and registers those of the enabled collectors in `registry`.
    pub fn register(registry: &Registry, psi: bool, cpi: bool) -> Result<Self, MetricError> {
        let gauge = |on: bool, name: &str, help: &str| {
            let g = IntGauge::new(name, help);
            if on {
                register(registry, g)
            } else {
                g.map_err(MetricError::Build)
            }
        };
        Ok(Self {
            cpi_supported: gauge(
                cpi,
                CPI_SUPPORTED,
                "1 if this node can count cycles and instructions per cgroup (a PMU and the \
                 permission to use it), 0 if not; the CPI collector is idle at 0.",
            )?,
            psi_unavailable: gauge(
                psi,
                PSI_UNAVAILABLE,
                "Pod and container cgroups whose pressure files could not be read in the last \
                 PSI round.",
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_enabled_collectors_are_exposed() {
        let registry = Registry::new();
        let m = CollectorMetrics::register(&registry, true, false).expect("register");
        m.cpi_supported.set(1);
        let text = koord_runtime::metrics::render(&registry);
        assert!(
            text.contains("koord_applier_psi_unavailable_cgroups 0"),
            "{text}"
        );
        assert!(!text.contains(CPI_SUPPORTED), "{text}");
        assert!(
            CollectorMetrics::register(&registry, true, false).is_err(),
            "names are unique"
        );
    }
}
