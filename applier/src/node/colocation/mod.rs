//! Colocation ("dynamic resource overcommit"), part 1: advertise on the Node how much of what
//! latency-sensitive pods reserved but do not use can be lent to BE pods
//! (`kubernetes.io/batch-cpu` / `kubernetes.io/batch-memory`), and squeeze BE pods' CPU when the
//! node gets busy.
//!
//! Why this piece of policy lives on the node: both numbers depend on what the node measures
//! (usage of every pod and of the system) every few seconds; the webhook decides per pod at
//! admission and never sees usage. The policy itself (thresholds, policies) still comes from
//! the cluster ConfigMap, read here directly.
//!
//! - [`config`]: `colocation-config` and `resource-threshold-config` (pure);
//! - [`usage`] / [`window`]: cgroup and /proc readings, aggregation over the window;
//! - [`capacity`] / [`suppress`]: the formulas (pure) and the BE parent cgroup writes;
//! - [`engine`]: the synchronous core (no API server), [`node_status`]: the Node patch;
//! - [`settings`]: the loop's settings, [`metrics`]: the metric families, [`configmap`]: the ConfigMap watch;
//! - [`control_loop`]: the loop inside `run`; this file: [`ColocationFeature`], the node
//!   feature of `run`.

pub mod capacity;
pub mod config;
pub mod configmap;
pub mod control_loop;
pub mod engine;
pub mod metrics;
pub mod node_status;
pub mod pod_facts;
pub mod settings;
pub mod suppress;
pub mod usage;
pub mod window;

use tracing::Instrument as _;

use crate::feature::{FeatureError, NodeFeature, RunContext, Running};

pub use configmap::on_configmap;
pub use control_loop::{Colocation, suppress_round};
pub use metrics::ColocationMetrics;
pub use settings::Settings;

/// The loop as a node feature of `run`, on when `--colocation` is (off in a dry run: it writes
/// the BE parent and patches the Node).
pub struct ColocationFeature {
    pub settings: Settings,
}

impl NodeFeature for ColocationFeature {
    fn name(&self) -> &'static str {
        "colocation"
    }

    fn changes_the_node(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        if !self.settings.enabled {
            tracing::info!("colocation off (--colocation=false)");
            return Ok(None);
        }
        let c = Colocation {
            client: ctx.client.clone(),
            layout: ctx.layout.clone(),
            proc_root: ctx.proc_root.clone(),
            node_name: ctx.node_name.clone(),
            settings: self.settings,
            metrics: ColocationMetrics::register(ctx.metrics.registry())?,
            pods: ctx.pods.clone(),
            writer: ctx.writer.clone(),
        };
        Ok(Some(Running::task(tokio::spawn(
            c.run().instrument(tracing::info_span!("colocation")),
        ))))
    }
}
