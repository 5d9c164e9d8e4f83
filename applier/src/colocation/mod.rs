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
//! - this file: flags, metrics and the loop (ConfigMap and pod reflectors, the ticker).

pub mod capacity;
pub mod config;
pub mod engine;
pub mod node_status;
pub mod pod_facts;
pub mod suppress;
pub mod usage;
pub mod window;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt as _, watcher};
use prometheus::{Encoder, Gauge, GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};

use crate::cgroup::layout::Layout;
use capacity::{advertised, update_decision};
use config::{ConfigState, SloConfig};
use engine::Engine;
use pod_facts::PodFacts;

/// Flags of `run` for colocation (flattened into its arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct ColocationArgs {
    /// Run the colocation loop (the ConfigMap's `enable` flags still decide what it does).
    #[arg(long = "colocation", env = "KOORD_COLOCATION", default_value_t = true, action = clap::ArgAction::Set)]
    pub colocation: bool,
    /// Namespace of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAMESPACE", default_value = koord_api::keys::CONFIG_NAMESPACE)]
    pub slo_config_namespace: String,
    /// Name of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAME", default_value = koord_api::keys::CLUSTER_CONFIGMAP)]
    pub slo_config_name: String,
    /// Usage is sampled and BE suppression recomputed this often.
    #[arg(long, env = "KOORD_COLOCATION_SAMPLE_SECONDS", default_value_t = 2.0)]
    pub colocation_sample_seconds: f64,
    /// The batch capacity is recomputed (and the Node patched if needed) this often.
    #[arg(long, env = "KOORD_COLOCATION_REPORT_SECONDS", default_value_t = 60.0)]
    pub colocation_report_seconds: f64,
    /// BE pods always keep at least this many CPUs (fractions allowed for cfsQuota; cpuset
    /// rounds up), or every CPU the node has when it has fewer.
    #[arg(long, env = "KOORD_BE_SUPPRESS_MIN_CPUS", default_value_t = 2.0)]
    pub be_suppress_min_cpus: f64,
}

/// Settings of the colocation loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    pub configmap_namespace: String,
    pub configmap_name: String,
    pub sample_interval: Duration,
    pub report_interval: Duration,
    /// The suppression floor in milli-CPUs (`--be-suppress-min-cpus` x 1000).
    pub be_suppress_min_milli: i64,
}

impl Default for Settings {
    /// Off (a `RunConfig` built in code runs no colocation unless asked).
    fn default() -> Self {
        Self {
            enabled: false,
            configmap_namespace: koord_api::keys::CONFIG_NAMESPACE.to_owned(),
            configmap_name: koord_api::keys::CLUSTER_CONFIGMAP.to_owned(),
            sample_interval: Duration::from_secs(2),
            report_interval: Duration::from_secs(60),
            be_suppress_min_milli: 2_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--{0} must be a number of seconds in 0.1..=3600")]
    Interval(&'static str),
    #[error("--be-suppress-min-cpus must be in 0..=1024")]
    MinCpus,
}

fn interval(v: f64, flag: &'static str) -> Result<Duration, SettingsError> {
    if v.is_finite() && (0.1..=3600.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(SettingsError::Interval(flag))
    }
}

impl TryFrom<&ColocationArgs> for Settings {
    type Error = SettingsError;
    fn try_from(a: &ColocationArgs) -> Result<Self, SettingsError> {
        if !(a.be_suppress_min_cpus.is_finite() && (0.0..=1024.0).contains(&a.be_suppress_min_cpus))
        {
            return Err(SettingsError::MinCpus);
        }
        Ok(Self {
            enabled: a.colocation,
            configmap_namespace: a.slo_config_namespace.clone(),
            configmap_name: a.slo_config_name.clone(),
            sample_interval: interval(a.colocation_sample_seconds, "colocation-sample-seconds")?,
            report_interval: interval(a.colocation_report_seconds, "colocation-report-seconds")?,
            be_suppress_min_milli: (a.be_suppress_min_cpus * 1000.0).round() as i64,
        })
    }
}

/// Colocation metrics, registered in the applier's registry (`/metrics`) by `run`.
#[derive(Clone)]
pub struct ColocationMetrics {
    registry: Registry,
    /// ConfigMap keys that failed to parse (the last good value stays), by key.
    pub config_errors: IntCounterVec,
    /// What the Node advertises (after our last patch), by resource.
    pub batch_advertised: GaugeVec,
    /// Node status patches by reason (missing, moved, expired) and result (ok, error).
    pub node_patches: IntCounterVec,
    /// CPUs BE pods may use now (the suppression budget); -1 when not suppressing.
    pub be_cpu_limit: Gauge,
    /// CPUs BE pods used over the last interval.
    pub be_cpu_usage: Gauge,
    /// 1 while LS/system pressure keeps BE below its share (node CPUs x threshold%).
    pub be_suppressed: Gauge,
    /// 1 while batch resources are degraded to 0 (usage data too old).
    pub degraded: Gauge,
    /// BE parent writes by policy and result.
    pub suppress_writes: IntCounterVec,
}

impl ColocationMetrics {
    /// In a registry of their own (tests).
    pub fn new() -> Self {
        Self::register_in(&Registry::new())
    }

    /// Registers the families in `registry` (the applier's). Panics only on a duplicate name,
    /// a programming error that any test of `run` catches.
    pub fn register_in(registry: &Registry) -> Self {
        let registry = registry.clone();
        let config_errors = IntCounterVec::new(
            Opts::new(
                "koord_applier_colocation_config_errors_total",
                "ConfigMap keys that failed to parse; the last good value is kept.",
            ),
            &["key"],
        )
        .expect("valid metric");
        let batch_advertised = GaugeVec::new(
            Opts::new("koord_applier_batch_resource_advertised", "Batch resource on the Node after the last patch (batch-cpu in milli-cores, batch-memory in bytes)."),
            &["resource"],
        )
        .expect("valid metric");
        let node_patches = IntCounterVec::new(
            Opts::new(
                "koord_applier_node_status_patches_total",
                "Node status patches of the batch resources by reason and result.",
            ),
            &["reason", "result"],
        )
        .expect("valid metric");
        let be_cpu_limit = Gauge::new(
            "koord_applier_be_cpu_limit_cores",
            "CPUs BE pods may use now (suppression budget); -1 when suppression is off.",
        )
        .expect("valid metric");
        let be_cpu_usage = Gauge::new(
            "koord_applier_be_cpu_usage_cores",
            "CPUs BE pods used over the last sampling interval.",
        )
        .expect("valid metric");
        let be_suppressed = Gauge::new("koord_applier_be_suppressed", "1 while LS and system usage keep BE pods below node CPUs x cpuSuppressThresholdPercent.").expect("valid metric");
        let degraded = Gauge::new("koord_applier_batch_degraded", "1 while batch resources are degraded to 0 because usage data is older than degradeTimeMinutes.").expect("valid metric");
        let suppress_writes = IntCounterVec::new(
            Opts::new(
                "koord_applier_be_suppress_writes_total",
                "Writes to the BE parent cgroup by policy and result.",
            ),
            &["policy", "result"],
        )
        .expect("valid metric");
        for c in [
            Box::new(config_errors.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(batch_advertised.clone()),
            Box::new(node_patches.clone()),
            Box::new(be_cpu_limit.clone()),
            Box::new(be_cpu_usage.clone()),
            Box::new(be_suppressed.clone()),
            Box::new(degraded.clone()),
            Box::new(suppress_writes.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        be_cpu_limit.set(-1.0);
        Self {
            registry,
            config_errors,
            batch_advertised,
            node_patches,
            be_cpu_limit,
            be_cpu_usage,
            be_suppressed,
            degraded,
            suppress_writes,
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl Default for ColocationMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Applies a ConfigMap change (`None`: deleted) to the shared config, logging and counting
/// keys that did not parse.
pub fn on_configmap(
    state: &Mutex<ConfigState>,
    data: Option<&std::collections::BTreeMap<String, String>>,
    metrics: &ColocationMetrics,
) {
    let Ok(mut s) = state.lock() else { return };
    let before = s.current.clone();
    for e in s.update(data) {
        let key = match &e {
            config::ConfigError::Json { key, .. }
            | config::ConfigError::Range { key, .. }
            | config::ConfigError::Enum { key, .. } => *key,
        };
        metrics.config_errors.with_label_values(&[key]).inc();
        tracing::error!(error = %e, "colocation config rejected; keeping the last good value");
    }
    if s.current != before {
        tracing::info!(config = ?s.current, "colocation config changed");
    }
}

/// Watches the one ConfigMap (field selector on its name, so RBAC `resourceNames` applies).
async fn watch_configmap(
    api: Api<ConfigMap>,
    name: String,
    state: Arc<Mutex<ConfigState>>,
    metrics: ColocationMetrics,
) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
    let mut seen = false;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                seen = true;
                on_configmap(&state, cm.data.as_ref(), &metrics);
            }
            Ok(watcher::Event::Delete(_)) => {
                seen = false;
                on_configmap(&state, None, &metrics);
            }
            Ok(watcher::Event::Init) => seen = false,
            Ok(watcher::Event::InitDone) => {
                if !seen {
                    on_configmap(&state, None, &metrics);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "colocation ConfigMap watch error; retrying with backoff")
            }
        }
    }
}

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
}

/// Starts the loop when `--colocation` is on (`run` calls this with the applier's pod cache
/// and metrics registry).
pub fn spawn_for_run(
    client: kube::Client,
    layout: Layout,
    proc_root: PathBuf,
    node_name: &str,
    settings: Settings,
    pods: Store<Pod>,
    registry: &Registry,
) {
    if !settings.enabled {
        tracing::info!("colocation off (--colocation=false)");
        return;
    }
    let c = Colocation {
        client,
        layout,
        proc_root,
        node_name: node_name.to_owned(),
        settings,
        metrics: ColocationMetrics::register_in(registry),
        pods,
    };
    tokio::spawn(c.run());
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
        tokio::spawn(watch_configmap(
            cm_api,
            self.settings.configmap_name.clone(),
            state.clone(),
            self.metrics.clone(),
        ));
        let nodes: Api<Node> = Api::all(self.client.clone());
        let engine = match Engine::new(
            self.layout.clone(),
            &self.proc_root,
            self.settings.be_suppress_min_milli,
        ) {
            Ok(e) => Arc::new(Mutex::new(e)),
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
        loop {
            tick.tick().await;
            let cfg: SloConfig = state.lock().map(|s| s.current.clone()).unwrap_or_default();
            let pods = facts(&self.pods);
            let eng = engine.clone();
            let metrics = self.metrics.clone();
            let round_pods = pods.clone();
            let round_cfg = cfg.clone();
            let suppressed = tokio::task::spawn_blocking(move || {
                let Ok(mut e) = eng.lock() else { return None };
                let rep = e.sample(
                    Instant::now(),
                    &round_pods,
                    round_cfg.colocation.metric_aggregate_duration,
                );
                for err in &rep.errors {
                    tracing::debug!(error = %err, "colocation sample");
                }
                suppress_round(&mut e, &round_cfg, &round_pods, &metrics)
            })
            .await
            .ok()
            .flatten();
            if suppressed.is_none() && was_suppressed {
                was_suppressed = false;
                tracing::info!("BE suppression off");
            }
            if let Some(r) = suppressed.filter(|r| r.suppressed != was_suppressed) {
                was_suppressed = r.suppressed;
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
            let due = reporter
                .last_report
                .is_none_or(|t| t.elapsed() >= self.settings.report_interval);
            if due {
                self.report(&engine, &nodes, &cfg, &pods, &mut reporter)
                    .await;
            }
        }
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
        let on_node = node_status::advertised_on_node(&node);
        let c = &cfg.colocation;
        if !c.enable && on_node.is_none() {
            // Never enabled here (or already withdrawn): nothing to advertise, nothing to reset.
            reporter.last_report = Some(Instant::now());
            return;
        }
        let now = Instant::now();
        let (input, age) = {
            let Ok(e) = engine.lock() else { return };
            let input = node_status::allocatable(&node).and_then(|a| e.capacity_input(a, pods));
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
                allocatable = ?node_status::allocatable(&node),
                "colocation: no capacity input yet"
            );
            return;
        }
        reporter.last_report = Some(now);
        let new = advertised(c, input.as_ref(), age);
        let decision = update_decision(c, on_node, new, reporter.last_patch.map(|t| t.elapsed()));
        tracing::debug!(
            ?new,
            ?on_node,
            decision = decision.as_str(),
            "colocation report"
        );
        if !decision.patch() {
            return;
        }
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

/// One suppression round with metrics; the round when suppression is on.
pub fn suppress_round(
    e: &mut Engine,
    cfg: &SloConfig,
    pods: &[PodFacts],
    metrics: &ColocationMetrics,
) -> Option<engine::SuppressRound> {
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
