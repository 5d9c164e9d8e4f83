//! The proactive reclaim loop as a node feature of `run`: detects what the node offers, then
//! starts the loop's thread over the watch's pod cache (never in a dry run: it reclaims).
//! On a node that lacks cgroup v2, `memory.reclaim` or PSI the thread still runs, without a
//! container: it only posts each opted-in pod's Event saying what the kernel lacks.

use crate::feature::{FeatureError, NodeFeature, RunContext, Running};

use super::Settings;
use super::cgroup::node_support;
use super::metrics::ProactiveMetrics;
use super::worker::{ProactiveLoop, run};

pub struct ProactiveReclaim {
    pub settings: Settings,
}

impl NodeFeature for ProactiveReclaim {
    fn name(&self) -> &'static str {
        "proactive reclaim"
    }

    fn changes_the_node(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { settings } = *self;
        if !settings.enabled {
            tracing::info!("proactive reclaim off (--proactive-reclaim=false)");
            return Ok(None);
        }
        let metrics = ProactiveMetrics::register(ctx.metrics.registry())?;
        let support = node_support(&ctx.layout);
        match support {
            Ok(()) => tracing::info!(
                write_budget_ms = settings.write_budget.as_millis(),
                "proactive reclaim: memory.reclaim while a container's memory stall stays under its target, for the pods whose annotation enables it"
            ),
            Err(lack) => tracing::info!(
                lacks = lack.text(),
                "proactive reclaim unsupported on this node: pods that enable it get an Event, nothing is reclaimed"
            ),
        }
        let lp = ProactiveLoop::new(ctx.layout.clone(), support, settings, Some(metrics));
        let (store, events) = (ctx.pods.clone(), ctx.events.clone());
        std::thread::Builder::new()
            .name("proactive-reclaim".to_owned())
            .spawn(move || run(lp, store, events))
            .map_err(|source| FeatureError::Thread {
                what: "proactive reclaim loop",
                source,
            })?;
        Ok(Some(Running::passive()))
    }
}
