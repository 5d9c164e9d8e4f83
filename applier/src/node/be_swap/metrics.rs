//! The BE swap grant's metric families, registered in the applier's registry.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{IntCounter, IntGauge, Registry};

#[derive(Clone)]
pub struct BeSwapMetrics {
    /// BE containers whose `memory.swap.max` holds the applier's grant.
    pub containers: IntGauge,
    /// The sum of those grants, bytes.
    pub bytes: IntGauge,
    /// `memory.swap.max` reads or writes that failed (the container is tried again next pass).
    pub errors: IntCounter,
}

impl BeSwapMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        Ok(Self {
            containers: register(
                registry,
                IntGauge::new(
                    "koord_applier_be_swap_granted_containers",
                    "BE containers whose memory.swap.max holds the applier's grant (--be-swap-percent).",
                ),
            )?,
            bytes: register(
                registry,
                IntGauge::new(
                    "koord_applier_be_swap_granted_bytes",
                    "The sum of the BE containers' memory.swap.max grants, bytes.",
                ),
            )?,
            errors: register(
                registry,
                IntCounter::new(
                    "koord_applier_be_swap_errors_total",
                    "memory.swap.max reads or writes for a BE container's grant that failed.",
                ),
            )?,
        })
    }
}
