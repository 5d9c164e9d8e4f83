//! The async reclaim emulation as a node feature of `run`: the emulation with its worker
//! thread when the settings and the kernel
//! allow it (never in a dry run: it would reclaim). The pod pass takes part through the
//! emulation's `ContainerHooks`, so starting it hands `run` the emulation for the pod pass;
//! at exit every throttle in force is released.

use std::sync::Arc;

use crate::feature::{FeatureError, Give, NodeFeature, RunContext, Running};

use super::{AsyncReclaim, ReclaimMetrics, Settings};

pub struct AsyncReclaimFeature {
    pub settings: Settings,
    /// The emulation, for the pod pass's hooks.
    pub pod_pass: Give<Arc<AsyncReclaim>>,
}

impl NodeFeature for AsyncReclaimFeature {
    fn name(&self) -> &'static str {
        "async reclaim"
    }

    fn changes_the_node(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { settings, pod_pass } = *self;
        let metrics = ReclaimMetrics::register(ctx.metrics.registry())?;
        let (interval, cpu_percent) = (settings.interval, settings.cpu_percent);
        let (wmark, be_first, throttle) = (settings.enabled, settings.be_first, settings.throttle);
        let Some(reclaim) =
            AsyncReclaim::detect(&ctx.layout, settings, ctx.writer.clone(), Some(metrics))
        else {
            return Ok(None);
        };
        reclaim.start().map_err(|source| FeatureError::Thread {
            what: "async reclaim worker",
            source,
        })?;
        tracing::info!(
            interval_ms = interval.as_millis(),
            cpu_percent,
            async_reclaim = wmark,
            be_first,
            be_first_throttle = throttle,
            "memory.reclaim emulates what this kernel lacks: memory.wmark_ratio (containers kept below their wmark_high) and memory.wmark_min_adj (BE containers reclaimed first, and their growth held with memory.high, when the node's free memory nears the watermarks)"
        );
        pod_pass.give(reclaim.clone());
        // A BE throttle in force is released before the process goes.
        Ok(Some(
            Running::passive().at_exit(move || reclaim.release_all()),
        ))
    }
}
