//! The NRI plugin as a node feature of `run` (container values at creation) unless `--nri=off`
//! or a dry run: its connection loop is a task, and its link goes to the pod watch (the watch
//! tells it which pods it has seen and which containers it wrote). The mode is in the log, in
//! `koord_applier_apply_mode` and in the doctor.

use std::sync::Arc;

use crate::feature::{FeatureError, Give, NodeFeature, RunContext, Running};

use super::decide::Decider;
use super::link::{Link, Plugged};
use super::metrics::NriMetrics;
use super::{NriMode, Settings, probe_files, start};

pub struct NriPlugin {
    pub settings: Settings,
    /// The link and its nudges, for the pod watch.
    pub watch: Give<Plugged>,
}

impl NodeFeature for NriPlugin {
    fn name(&self) -> &'static str {
        "NRI plugin"
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { settings, watch } = *self;
        let metrics = NriMetrics::register(ctx.metrics.registry())?;
        if ctx.dry_run && settings.mode != NriMode::Off {
            tracing::info!("NRI off in a dry run: it would change containers; watch mode");
            return Ok(None);
        }
        let decider = Decider {
            version: ctx.layout.version,
            caps: ctx.caps,
            files: probe_files(&ctx.layout),
        };
        let (link, nudges) = Link::new(decider, Some(metrics));
        let link = Arc::new(link);
        let Some(task) = start(link.clone(), ctx.pods.clone(), settings) else {
            return Ok(None);
        };
        watch.give(Plugged { link, nudges });
        Ok(Some(Running::task(task)))
    }
}
