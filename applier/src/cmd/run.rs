//! `koord-applier run`: the DaemonSet. Builds the shared parts once (layout, metrics, the
//! watch's pod cache, the Event sink), starts each feature the same way
//! ([`crate::feature::RunContext`]), serves `/metrics`, and runs the pod watch until a signal.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use k8s_openapi::api::core::v1::Pod;
use koord_runtime::metrics::MetricError;
use kube::api::Api;
use kube::runtime::reflector;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use koord_translator::pod::apply::Applier;
use koord_translator::pod::hooks::ContainerHooks;

use crate::cli::{Config, ConfigError, RunConfig};
use crate::event_sink;
use crate::feature::RunContext;
use crate::metrics::Metrics;
use crate::node::ancestors::{KubeletMemoryQos, MemoryAncestors};
use crate::node::collectors::{CollectorConfig, GateError};
use crate::node::nri::NriMode;
use crate::node::nri::decide::Decider;
use crate::node::nri::link::{Link, Plugged};
use crate::node::nri::metrics::NriMetrics;
use crate::node::qos_parents::{NodeQos, detect_caps, detect_resctrl};
use crate::node::reclaim::{AsyncReclaim, ReclaimMetrics};
use crate::node::{collectors, colocation, nri, numa};
use crate::pod::watch::Watch;
use crate::server;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Gates(#[from] GateError),
    #[error(transparent)]
    Metrics(#[from] MetricError),
    #[error(transparent)]
    Endpoint(#[from] server::EndpointError),
    #[error("cannot start the async reclaim worker: {0}")]
    Thread(#[source] std::io::Error),
    #[error("metrics listener {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// In-cluster or kubeconfig credentials.
pub async fn run(config: Config, run: RunConfig) -> Result<(), RunError> {
    run_with_client(config, run, koord_runtime::api_client().await?).await
}

/// Everything `run` starts, given a client (tests pass a mocked one).
pub async fn run_with_client(
    config: Config,
    run: RunConfig,
    client: kube::Client,
) -> Result<(), RunError> {
    let layout = config.layout()?;
    // Before anything opens a file: the kept knob files and the metrics endpoint's connection
    // cap are sized from the limit.
    let nofile = koord_translator::fd_limit::raise_to_hard();
    server::check_cap(run.endpoint.max_connections, nofile)?;
    tracing::info!(root = %layout.root.display(), version = %layout.version, driver = %layout.driver, kubelet_cgroup_root = %layout.kubelet_root, node = %run.node_name, "starting");
    // Every feature reads the watch's pod cache (no second watch) and posts through one sink.
    let (store, writer) = reflector::store::<Pod>();
    let (events, events_rx) = mpsc::channel(1024);
    let metrics = Arc::new(Metrics::new()?);
    // Before the first pass: on the systemd driver, unit values go through systemd.
    let systemd = koord_translator::cgroup::systemd::Units::start(
        &layout,
        &config.systemd,
        config.dry_run,
        Some(metrics.registry()),
    );
    let ctx = RunContext {
        client: client.clone(),
        layout,
        node_name: run.node_name.clone(),
        proc_root: config.proc_root.clone(),
        sys_root: config.sys_root.clone(),
        dry_run: config.dry_run,
        pods: store.clone(),
        events,
        metrics,
        systemd,
    };
    ctx.metrics.set_cgroup_layout(&ctx.layout);
    start_features(&ctx, &config, &run)?;
    let reclaim = crate::node::reclaim::Settings {
        proc_root: config.proc_root.clone(),
        ..run.reclaim.clone()
    };
    // Before the first pod pass, whatever the reclaim settings now: a BE throttle an earlier
    // applier died holding goes back (a dry run writes nothing).
    if !ctx.dry_run {
        crate::node::reclaim::release_left_throttles(&ctx.layout);
    }
    let CgroupPasses {
        applier,
        node_qos,
        ancestors,
        reclaim,
    } = cgroup_passes(&ctx, &config, reclaim)?;
    let ready = Arc::new(AtomicBool::new(false));
    serve_metrics(&ctx, &run, ready.clone()).await?;
    tokio::spawn(
        event_sink::publish(
            client.clone(),
            run.node_name.clone(),
            events_rx,
            run.event_window,
            ctx.metrics.clone(),
        )
        .instrument(tracing::info_span!("event_sink")),
    );
    let (nri, nudges) = match start_nri(&ctx, &config, &run, applier.caps())? {
        Some(p) => (Some(p.link), Some(p.nudges)),
        None => (None, None),
    };
    let watch = Watch {
        applier,
        metrics: Some(ctx.metrics.clone()),
        node_qos: Some(node_qos),
        ancestors,
        events: ctx.events.clone(),
        resync: run.resync,
        ancestors_check: run.ancestors_check,
        ready,
        nri,
        nudges,
    };
    let api: Api<Pod> = Api::all(client);
    tokio::select! {
        () = watch.run_with_store(api, &run.node_name, store, writer)
            .instrument(tracing::info_span!("pod_watch", node = %run.node_name)) => {}
        () = koord_runtime::shutdown_signal() => tracing::info!("signalled; exiting"),
    }
    if let Some(r) = reclaim {
        r.release_all();
    }
    Ok(())
}

/// The collectors, memory locality and colocation, each off unless its flags say otherwise.
fn start_features(ctx: &RunContext, config: &Config, run: &RunConfig) -> Result<(), RunError> {
    collectors::start(ctx, CollectorConfig::from_args(&config.collectors, false)?)?;
    numa::start(ctx, config.locality)?;
    colocation::start(ctx, run.colocation.clone())?;
    Ok(())
}

/// The NRI plugin (container values at creation) unless `--nri=off` or a dry run; its link
/// goes to the watch. The mode is in the log, in `koord_applier_apply_mode` and in the doctor.
fn start_nri(
    ctx: &RunContext,
    config: &Config,
    run: &RunConfig,
    caps: koord_translator::pod::plan::NodeCaps,
) -> Result<Option<Plugged>, RunError> {
    let metrics = NriMetrics::register(ctx.metrics.registry())?;
    if config.dry_run && run.nri.mode != NriMode::Off {
        tracing::info!("NRI off in a dry run: it would change containers; watch mode");
        return Ok(None);
    }
    let decider = Decider {
        version: ctx.layout.version,
        caps,
        files: nri::probe_files(&ctx.layout),
    };
    let (link, nudges) = Link::new(decider, Some(metrics));
    let link = Arc::new(link);
    Ok(nri::start(link.clone(), ctx.pods.clone(), run.nri.clone())
        .map(|_| Plugged { link, nudges }))
}

/// The per-pod pass, the node-level pass (QoS-class parents, resctrl), with the node's
/// capabilities detected once, and the ancestors' memory protection (unless turned off).
struct CgroupPasses {
    applier: Arc<Applier>,
    node_qos: Arc<NodeQos>,
    ancestors: Option<Arc<MemoryAncestors>>,
    /// The async-reclaim emulation, the pod pass's hooks; kept for the exit: a BE throttle in
    /// force is released before the process goes.
    reclaim: Option<Arc<AsyncReclaim>>,
}

fn cgroup_passes(
    ctx: &RunContext,
    config: &Config,
    reclaim: crate::node::reclaim::Settings,
) -> Result<CgroupPasses, RunError> {
    let caps = detect_caps(
        &ctx.layout,
        config.cpu_idle_fallback,
        config.cpu_idle_qos_parents,
    );
    let resctrl = detect_resctrl(&config.resctrl_root, Some(&ctx.metrics))
        .map(|s| (config.resctrl_root.clone(), s));
    let node_qos = Arc::new(NodeQos::new(
        ctx.layout.clone(),
        config.dry_run,
        caps,
        resctrl,
        Some(ctx.metrics.clone()),
    ));
    let reclaim = async_reclaim(ctx, reclaim)?;
    // The emulation takes part in every pod pass: it holds the `memory.high` its BE throttle
    // set and registers the containers whose `memory.wmark_*` this kernel lacks.
    let hooks = reclaim.clone().map(|r| -> Arc<dyn ContainerHooks> { r });
    let applier = Arc::new(
        Applier::new(
            ctx.layout.clone(),
            config.dry_run,
            Some(ctx.metrics.apply.clone()),
        )
        .with_caps(caps)
        .with_systemd(ctx.systemd.clone())
        .with_hooks(hooks),
    );
    let ancestors = config.ancestors.enabled.then(|| {
        Arc::new(
            MemoryAncestors::new(
                ctx.layout.clone(),
                config.dry_run,
                config.ancestors.kubelet_memory_qos,
                Some(ctx.metrics.clone()),
            )
            .with_systemd(ctx.systemd.clone()),
        )
    });
    tracing::info!(
        protect_ancestors = config.ancestors.enabled,
        kubelet_memory_qos = config.ancestors.kubelet_memory_qos.as_str(),
        "QoS-level memory protection: {}",
        match (
            config.ancestors.enabled,
            config.ancestors.kubelet_memory_qos
        ) {
            (false, _) =>
                "off (pod-level memory.min/low are capped by kubepods and its QoS-class cgroups)",
            (true, KubeletMemoryQos::Off) =>
                "kubepods and its QoS-class cgroups get the sums of their children",
            (true, _) =>
                "sums of the children, except in the files the kubelet's Memory QoS rewrites, which are left to it",
        }
    );
    Ok(CgroupPasses {
        applier,
        node_qos,
        ancestors,
        reclaim,
    })
}

/// The async reclaim emulation, its worker started, when the settings and the kernel allow it
/// (never in a dry run: it would reclaim).
fn async_reclaim(
    ctx: &RunContext,
    settings: crate::node::reclaim::Settings,
) -> Result<Option<Arc<AsyncReclaim>>, RunError> {
    if ctx.dry_run {
        return Ok(None);
    }
    let metrics = ReclaimMetrics::register(ctx.metrics.registry())?;
    let (interval, cpu_percent) = (settings.interval, settings.cpu_percent);
    let (wmark, be_first, throttle) = (settings.enabled, settings.be_first, settings.throttle);
    let Some(reclaim) = AsyncReclaim::detect(&ctx.layout, settings, Some(metrics)) else {
        return Ok(None);
    };
    reclaim.start().map_err(RunError::Thread)?;
    tracing::info!(
        interval_ms = interval.as_millis(),
        cpu_percent,
        async_reclaim = wmark,
        be_first,
        be_first_throttle = throttle,
        "memory.reclaim emulates what this kernel lacks: memory.wmark_ratio (containers kept below their wmark_high) and memory.wmark_min_adj (BE containers reclaimed first, and their growth held with memory.high, when the node's free memory nears the watermarks)"
    );
    Ok(Some(reclaim))
}

/// Binds `/metrics`, `/healthz` and `/readyz` and serves them in the background.
async fn serve_metrics(
    ctx: &RunContext,
    run: &RunConfig,
    ready: Arc<AtomicBool>,
) -> Result<(), RunError> {
    let listener = server::bind(run.metrics_addr)
        .await
        .map_err(|source| RunError::Bind {
            addr: run.metrics_addr,
            source,
        })?;
    tokio::spawn(
        server::serve(listener, ctx.metrics.clone(), ready, run.endpoint)
            .instrument(tracing::info_span!("metrics_server")),
    );
    Ok(())
}
