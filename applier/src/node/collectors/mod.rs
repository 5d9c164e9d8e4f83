//! The Performance Collector: pressure stall information per pod and container cgroup, and
//! cycles/instructions per container, exposed with the reference's metric names and labels
//! (`koordlet_container_psi`, `koordlet_pod_psi`, `koordlet_container_cpi`).
//!
//! - [`gates`]: the settings and `--feature-gates` (pure).
//! - [`perf_sys`]: `perf_event_open(2)` counter groups (a syscall module with `unsafe`).
//! - [`cpi`]: per-container counter groups over a window, multiplexing scale, sum over CPUs.
//! - [`exposition`]: the per-cgroup series and their text; [`metrics`]: the health gauges.
//! - [`collector`]: the per-node state and one round of each collector.
//! - [`loops`]: the rounds on their intervals; [`one_round`]: `once --collect`.
//! - this file: [`Collectors`], the node feature of `run`.

pub mod collector;
pub mod cpi;
pub mod exposition;
pub mod gates;
pub mod loops;
pub mod metrics;
pub mod one_round;
pub mod perf_sys;

use std::sync::{Arc, Mutex};

use tracing::Instrument as _;

use crate::feature::{FeatureError, NodeFeature, RunContext, Running};

pub use collector::{Collector, CpiWindow, PsiRound, perf_dir, psi_dir};
pub use gates::{
    CollectorConfig, GateError, Gates, KOORDLET_GATES_NOT_IMPLEMENTED, ignored_gates_warning,
    parse_gates,
};
pub use loops::{SharedCollector, run_loops, text_source};
pub use metrics::CollectorMetrics;
pub use one_round::{collect_once, node_name_for};

/// The collectors as a node feature of `run`, on when a gate is: their gauges go into the
/// applier's registry, their per-cgroup series into its text sources, the pod list is the
/// watch's store.
pub struct Collectors {
    pub config: CollectorConfig,
}

impl NodeFeature for Collectors {
    fn name(&self) -> &'static str {
        "collectors"
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let config = self.config;
        if !config.any() {
            return Ok(None);
        }
        let cm = CollectorMetrics::register(ctx.metrics.registry(), config.psi, config.cpi)?;
        let collector = Collector::new(
            ctx.layout.clone(),
            ctx.node_name.clone(),
            cm,
            &config,
            &ctx.sys_root,
        );
        tracing::info!(
            psi = collector.psi_active(),
            cpi = collector.cpi_active(),
            "collectors started"
        );
        let shared = Arc::new(Mutex::new(collector));
        ctx.metrics.add_text_source(text_source(&shared));
        let store = ctx.pods.clone();
        Ok(Some(Running::task(tokio::spawn(
            run_loops(shared, config, move || store.state())
                .instrument(tracing::info_span!("collectors")),
        ))))
    }
}
