//! `koord-applier run`: the DaemonSet. Builds the shared parts once (layout, the node's CPU
//! capabilities, metrics, the watch's pod cache, the Event sink), starts every node feature the
//! one way ([`crate::feature::NodeFeature`], the list in [`super::features`]), builds the pod
//! pass with what the features handed over, serves `/metrics`, and runs the pod watch until a
//! signal; then stops the features (async reclaim releases its throttles).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use k8s_openapi::api::core::v1::Pod;
use koord_runtime::metrics::MetricError;
use kube::api::Api;
use kube::runtime::reflector;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use koord_translator::cgroup::detect::DetectError;
use koord_translator::cgroup::{CgroupVersion, Controller};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::hooks::ContainerHooks;

use super::features::{Handovers, node_features};
use crate::config::{Config, RunConfig};
use crate::event_sink;
use crate::feature::{FeatureError, RunContext, start_all, stop_all};
use crate::metrics::Metrics;
use crate::node::qos_parents::detect_caps;
use crate::node::writer::NodeWriter;
use crate::pod::watch::Watch;
use crate::server;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Layout(#[from] DetectError),
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Metrics(#[from] MetricError),
    #[error(transparent)]
    Feature(#[from] FeatureError),
    #[error(transparent)]
    Endpoint(#[from] server::EndpointError),
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
    let layout = config.cgroup.layout()?;
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
    let caps = detect_caps(
        &layout,
        config.cpu_idle_fallback,
        config.cpu_idle_qos_parents,
    );
    let node_writer = Arc::new(
        NodeWriter::new(config.dry_run, layout.version == CgroupVersion::V2)
            .with_systemd(systemd.clone()),
    );
    let ctx = RunContext {
        client: client.clone(),
        layout,
        caps,
        node_name: run.node_name.clone(),
        proc_root: config.proc_root.clone(),
        sys_root: config.sys_root.clone(),
        dry_run: config.dry_run,
        pods: store.clone(),
        events,
        metrics,
        systemd,
        writer: node_writer,
    };
    ctx.metrics.set_cgroup_layout(&ctx.layout);
    put_back_left(&ctx);
    let (features, handovers) = node_features(&config, &run);
    let running = start_all(features, &ctx)?;
    let Handovers {
        node_qos,
        reclaim,
        ancestors,
        nri,
    } = handovers;
    let applier = pod_pass(&ctx, reclaim.take());
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
    let (nri, nudges) = match nri.take() {
        Some(p) => (Some(p.link), Some(p.nudges)),
        None => (None, None),
    };
    let watch = Watch {
        applier,
        metrics: Some(ctx.metrics.clone()),
        node_qos: node_qos.take(),
        ancestors: ancestors.take(),
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
    stop_all(running);
    // What a feature left held (it stopped without letting go) goes back too.
    let left = ctx.writer.release_all();
    if left.released > 0 || left.errors > 0 {
        tracing::info!(
            files = left.released,
            errors = left.errors,
            "cgroup values put back at exit"
        );
    }
    Ok(())
}

/// The per-pod pass, on the node's capabilities; the async-reclaim emulation (when it runs)
/// takes part in every pass through its hooks: it holds the `memory.high` its BE throttle set
/// and registers the containers whose `memory.wmark_*` this kernel lacks.
fn pod_pass(
    ctx: &RunContext,
    reclaim: Option<Arc<crate::node::reclaim::AsyncReclaim>>,
) -> Arc<Applier> {
    let hooks = reclaim.map(|r| -> Arc<dyn ContainerHooks> { r });
    Arc::new(
        Applier::new(
            ctx.layout.clone(),
            ctx.dry_run,
            Some(ctx.metrics.apply.clone()),
        )
        .with_caps(ctx.caps)
        .with_systemd(ctx.systemd.clone())
        .with_hooks(hooks),
    )
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

/// Before any feature writes, whatever the features on now: every value an earlier applier
/// recorded under `kubepods` and did not put back (it died, or a feature it ran is off now)
/// goes back.
fn put_back_left(ctx: &RunContext) {
    let Ok(root) = ctx
        .layout
        .dir(&ctx.layout.kubepods_dir(), Controller::Memory)
    else {
        return;
    };
    for left in ctx.writer.put_back_left(&root) {
        match left.put_back {
            Ok(v) => {
                tracing::info!(dir = %left.dir.display(), file = left.file, value = %v, "put back: a value an earlier run left")
            }
            Err(e) => {
                tracing::warn!(dir = %left.dir.display(), file = left.file, error = %e, "could not put back a value an earlier run left")
            }
        }
    }
}
