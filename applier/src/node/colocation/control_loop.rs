//! The colocation loop inside `run`: every sample interval, read usage into the window and run
//! one BE suppression round; every report interval, recompute the batch capacity and patch the
//! Node when the decision says so.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use tracing::Instrument as _;

use koord_translator::cgroup::layout::Layout;

use super::capacity::{self, Resources, UpdateDecision, advertised, update_decision};
use super::config::{ConfigState, SloConfig};
use super::configmap::watch_configmap;
use super::engine::{Engine, SuppressRound};
use super::metrics::ColocationMetrics;
use super::node_status;
use super::pod_facts::PodFacts;
use super::settings::Settings;

/// Everything the colocation loop needs.
pub struct Colocation {
    pub client: kube::Client,
    pub layout: Layout,
    pub proc_root: PathBuf,
    pub node_name: String,
    pub settings: Settings,
    pub metrics: ColocationMetrics,
    /// The applier's pod cache (this node's pods), shared with its watch.
    pub pods: Store<Pod>,
    /// What the BE slice's quota is written through.
    pub writer: Arc<crate::node::writer::NodeWriter>,
}

fn facts(store: &Store<Pod>) -> Vec<PodFacts> {
    store
        .state()
        .iter()
        .filter_map(|p| PodFacts::from_pod(p))
        .collect()
}

/// What the report step remembers between rounds.
#[derive(Default)]
struct Reporter {
    last_patch: Option<Instant>,
    last_report: Option<Instant>,
}

impl Colocation {
    /// Runs until the process ends. A node without readable usage degrades its batch resources
    /// to 0 (after `degradeTimeMinutes`) instead of stopping.
    pub async fn run(self) {
        let state = Arc::new(Mutex::new(ConfigState::default()));
        let cm_api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), &self.settings.configmap_namespace);
        tokio::spawn(
            watch_configmap(
                cm_api,
                self.settings.configmap_name.clone(),
                state.clone(),
                self.metrics.clone(),
            )
            .instrument(tracing::info_span!("colocation_configmap")),
        );
        let nodes: Api<Node> = Api::all(self.client.clone());
        let engine = match Engine::new(
            self.layout.clone(),
            &self.proc_root,
            self.settings.be_suppress_min_milli,
        ) {
            Ok(e) => Arc::new(Mutex::new(e.with_writer(self.writer.clone()))),
            Err(e) => {
                tracing::error!(error = %e, "colocation cannot read the node's CPUs; colocation off");
                return;
            }
        };
        // Without the pod list every pod's usage would count as system usage.
        if self.pods.wait_until_ready().await.is_err() {
            return;
        }
        tracing::info!(node = %self.node_name, sample_seconds = self.settings.sample_interval.as_secs_f64(), "colocation started");
        let mut tick = tokio::time::interval(self.settings.sample_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reporter = Reporter::default();
        let mut was_suppressed = false;
        let mut last_errors = Vec::new();
        loop {
            tick.tick().await;
            let cfg: SloConfig = state.lock().map(|s| s.current.clone()).unwrap_or_default();
            let pods = facts(&self.pods);
            let (round, errors) = self.sample_and_suppress(&engine, &cfg, &pods).await;
            log_sample_errors(errors, &mut last_errors);
            log_suppression_change(round.as_ref(), &mut was_suppressed);
            let due = reporter
                .last_report
                .is_none_or(|t| t.elapsed() >= self.settings.report_interval);
            if due {
                self.report(&engine, &nodes, &cfg, &pods, &mut reporter)
                    .await;
            }
        }
    }

    /// One sample into the window and one suppression round, on a blocking thread (file IO).
    async fn sample_and_suppress(
        &self,
        engine: &Arc<Mutex<Engine>>,
        cfg: &SloConfig,
        pods: &[PodFacts],
    ) -> (Option<SuppressRound>, Vec<String>) {
        let (eng, metrics) = (engine.clone(), self.metrics.clone());
        let (round_pods, round_cfg) = (pods.to_vec(), cfg.clone());
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _in_round = span.enter();
            let Ok(mut e) = eng.lock() else {
                return (None, Vec::new());
            };
            let rep = e.sample(
                Instant::now(),
                &round_pods,
                round_cfg.colocation.metric_aggregate_duration,
            );
            let round = suppress_round(&mut e, &round_cfg, &round_pods, &metrics);
            (round, rep.errors)
        })
        .await
        .unwrap_or_default()
    }

    async fn report(
        &self,
        engine: &Mutex<Engine>,
        nodes: &Api<Node>,
        cfg: &SloConfig,
        pods: &[PodFacts],
        reporter: &mut Reporter,
    ) {
        let node = match nodes.get(&self.node_name).await {
            Ok(n) => n,
            Err(e) => {
                // Retried at the next report interval, not at every sample.
                reporter.last_report = Some(Instant::now());
                tracing::warn!(error = %e, node = %self.node_name, "colocation: cannot get the Node");
                return;
            }
        };
        let Some((mut new, decision, degraded)) = self.decide(engine, &node, cfg, pods, reporter)
        else {
            return;
        };
        let withdrawn = !cfg.colocation.enable || degraded;
        if decision.patch()
            && !withdrawn
            && capacity::lowers(node_status::advertised_on_node(&node), new)
        {
            // The cache may lag a bind the scheduler made on the old value: a quorum read of
            // the pods bound here now keeps the kubelet from rejecting that pod.
            match self.bound_now().await {
                Ok(committed) => new = capacity::at_least(new, committed),
                Err(e) => {
                    tracing::warn!(error = %e, "colocation: cannot list this node's pods; Node left as is");
                    return;
                }
            }
        }
        if decision.patch() {
            self.patch_node(nodes, new, decision, degraded, reporter)
                .await;
        }
    }

    /// The batch requests of the pods bound to this node, read from the API server (not the
    /// cache).
    async fn bound_now(&self) -> Result<Resources, kube::Error> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node_name));
        let pods = api.list(&params).await?;
        let facts: Vec<PodFacts> = pods.items.iter().filter_map(PodFacts::from_pod).collect();
        Ok(capacity::committed(facts.iter().map(|p| &p.batch_request)))
    }

    /// What the Node should advertise and whether to patch it; `None` when there is nothing to
    /// decide yet (never enabled here, or not enough readings), with the next report scheduled.
    fn decide(
        &self,
        engine: &Mutex<Engine>,
        node: &Node,
        cfg: &SloConfig,
        pods: &[PodFacts],
        reporter: &mut Reporter,
    ) -> Option<(Resources, UpdateDecision, bool)> {
        let on_node = node_status::advertised_on_node(node);
        let c = &cfg.colocation;
        if !c.enable && on_node.is_none() {
            // Never enabled here (or already withdrawn): nothing to advertise, nothing to reset.
            reporter.last_report = Some(Instant::now());
            return None;
        }
        let now = Instant::now();
        let (input, age) = {
            let e = engine.lock().ok()?;
            let input = node_status::allocatable(node).and_then(|a| e.capacity_input(a, pods));
            (input, e.usage_age(now))
        };
        let degraded = c.enable && capacity::degraded(c, age);
        self.metrics.degraded.set(if degraded { 1.0 } else { 0.0 });
        if c.enable && input.is_none() && !degraded {
            // Not enough readings yet (or no allocatable on the Node): retry soon, but not at
            // every sample (at most every 5 s).
            let soon = self
                .settings
                .report_interval
                .saturating_sub(Duration::from_secs(5));
            reporter.last_report = Some(now.checked_sub(soon).unwrap_or(now));
            tracing::debug!(
                allocatable = ?node_status::allocatable(node),
                "colocation: no capacity input yet"
            );
            return None;
        }
        reporter.last_report = Some(now);
        let committed = capacity::committed(pods.iter().map(|p| &p.batch_request));
        let new = advertised(c, input.as_ref(), age, committed);
        let decision = update_decision(c, on_node, new, reporter.last_patch.map(|t| t.elapsed()));
        tracing::debug!(
            ?new,
            ?on_node,
            decision = decision.as_str(),
            "colocation report"
        );
        Some((new, decision, degraded))
    }

    async fn patch_node(
        &self,
        nodes: &Api<Node>,
        new: Resources,
        decision: UpdateDecision,
        degraded: bool,
        reporter: &mut Reporter,
    ) {
        match node_status::patch(nodes, &self.node_name, new).await {
            Ok(_) => {
                reporter.last_patch = Some(Instant::now());
                self.metrics
                    .node_patches
                    .with_label_values(&[decision.as_str(), "ok"])
                    .inc();
                self.metrics
                    .batch_advertised
                    .with_label_values(&["batch-cpu"])
                    .set(new.cpu_milli as f64);
                self.metrics
                    .batch_advertised
                    .with_label_values(&["batch-memory"])
                    .set(new.memory_bytes as f64);
                tracing::info!(
                    batch_cpu_milli = new.cpu_milli,
                    batch_memory_bytes = new.memory_bytes,
                    reason = decision.as_str(),
                    degraded,
                    "node batch resources updated"
                );
            }
            Err(e) => {
                self.metrics
                    .node_patches
                    .with_label_values(&[decision.as_str(), "error"])
                    .inc();
                tracing::warn!(error = %e, "colocation: node status patch failed");
            }
        }
    }
}

/// Logs when BE suppression starts, ends, or is switched off.
fn log_suppression_change(round: Option<&SuppressRound>, was_suppressed: &mut bool) {
    if round.is_none() && *was_suppressed {
        *was_suppressed = false;
        tracing::info!("BE suppression off");
    }
    let Some(r) = round.filter(|r| r.suppressed != *was_suppressed) else {
        return;
    };
    *was_suppressed = r.suppressed;
    let system = (r.input.node_used_milli - r.input.pods_used_milli).max(0);
    let what = if r.suppressed {
        "BE pods suppressed"
    } else {
        "BE pods back to their share"
    };
    tracing::info!(
        be_limit_cores = r.budget_milli as f64 / 1000.0,
        be_used_cores = r.be_used_milli as f64 / 1000.0,
        ls_used_cores = r.input.ls_used_milli as f64 / 1000.0,
        system_cores = system as f64 / 1000.0,
        threshold_percent = r.input.threshold_percent,
        value = %r.applied.value,
        "{what}"
    );
}

/// One suppression round with metrics; the round when suppression is on.
pub fn suppress_round(
    e: &mut Engine,
    cfg: &SloConfig,
    pods: &[PodFacts],
    metrics: &ColocationMetrics,
) -> Option<SuppressRound> {
    let policy = cfg.threshold.cpu_suppress_policy.as_str();
    match e.suppress(&cfg.threshold, pods) {
        Ok(Some(r)) => {
            if r.applied.changed {
                metrics
                    .suppress_writes
                    .with_label_values(&[policy, "written"])
                    .inc();
                tracing::debug!(budget_milli = r.budget_milli, value = %r.applied.value, "BE parent limit written");
            }
            metrics.be_cpu_limit.set(r.budget_milli as f64 / 1000.0);
            metrics.be_cpu_usage.set(r.be_used_milli as f64 / 1000.0);
            metrics
                .be_suppressed
                .set(if r.suppressed { 1.0 } else { 0.0 });
            Some(r)
        }
        Ok(None) => {
            metrics.be_cpu_limit.set(-1.0);
            metrics.be_suppressed.set(0.0);
            None
        }
        Err(err) => {
            metrics
                .suppress_writes
                .with_label_values(&[policy, "failed"])
                .inc();
            tracing::warn!(error = %err, "BE suppression write failed");
            None
        }
    }
}

/// A reading that fails is logged as a warning when it first appears (or changes), then at
/// debug while it repeats every sample: visible to an operator without a line per interval.
fn log_sample_errors(errors: Vec<String>, last: &mut Vec<String>) {
    let new = errors != *last;
    for err in &errors {
        if new {
            tracing::warn!(error = %err, "colocation sample failed; usage it needs is missing");
        } else {
            tracing::debug!(error = %err, "colocation sample failed (repeated)");
        }
    }
    *last = errors;
}
