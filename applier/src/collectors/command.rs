//! The collectors inside the commands: `run` (pods from the watch's reflector store) and
//! `once -f PODS --collect` (one round, printed; or, with the hidden `--collect-serve ADDR`,
//! the loops on their intervals with `/metrics`, for benchmarks and demos without an API
//! server).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;

use super::exposition::CollectorMetrics;
use super::{Collector, CollectorConfig, GateError, collect_once, node_name_for, read_pods};
use crate::cgroup::layout::Layout;
use crate::cli::{Config, ConfigError};
use crate::metrics::Metrics;
use crate::once::OnceError;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Gates(#[from] GateError),
    #[error(transparent)]
    Pods(#[from] OnceError),
    #[error("metrics listener {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--collect-serve: {0}")]
    Addr(String),
    #[error("runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("registering the collector metrics: {0}")]
    Register(#[from] prometheus::Error),
}

/// Starts the collectors of `run` when a gate is on: their families go into the applier's
/// registry (gauges) and text sources (per-cgroup series), the pod list is the watch's store.
pub fn spawn_for_run(
    layout: Layout,
    sys_root: &Path,
    node: &str,
    metrics: &Metrics,
    args: &super::CollectorArgs,
    store: Store<Pod>,
) -> Result<(), CollectError> {
    let config = CollectorConfig::from_args(args, false)?;
    if !config.any() {
        return Ok(());
    }
    let cm = CollectorMetrics::new();
    cm.register(metrics.registry(), config.psi, config.cpi)?;
    let collector = Collector::new(layout, node, cm, &config, sys_root);
    tracing::info!(
        psi = collector.psi_active(),
        cpi = collector.cpi_active(),
        "collectors started"
    );
    let shared = Arc::new(Mutex::new(collector));
    metrics.add_text_source(super::text_source(&shared));
    tokio::spawn(super::run_loops(shared, config, move || store.state()));
    Ok(())
}

/// `once -f FILE --collect`: the Prometheus text of one round. With `serve`, runs the loops
/// for the manifest's pods until SIGTERM/SIGINT, serving `/metrics` there instead.
pub fn once_command(
    config: &Config,
    file: &Path,
    serve: Option<&str>,
) -> Result<String, CollectError> {
    let layout = config.layout()?;
    let pods = read_pods(file)?;
    let collectors = CollectorConfig::from_args(&config.collectors, true)?;
    let Some(addr) = serve else {
        return Ok(collect_once(layout, &config.sys_root, &collectors, &pods));
    };
    let addr = crate::cli::parse_addr(addr).map_err(|_| CollectError::Addr(addr.to_owned()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CollectError::Runtime)?;
    rt.block_on(async move {
        let metrics = Arc::new(Metrics::new());
        let cm = CollectorMetrics::new();
        cm.register(metrics.registry(), collectors.psi, collectors.cpi)?;
        let node = pods.first().map(node_name_for).unwrap_or_default();
        let collector = Arc::new(Mutex::new(Collector::new(
            layout,
            node,
            cm,
            &collectors,
            &config.sys_root,
        )));
        metrics.add_text_source(super::text_source(&collector));
        let listener = crate::server::bind(addr)
            .await
            .map_err(|source| CollectError::Bind { addr, source })?;
        tokio::spawn(crate::server::serve(
            listener,
            metrics,
            Arc::new(AtomicBool::new(true)),
        ));
        let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
        tracing::info!(%addr, pods = pods.len(), "collecting for a fixed pod list");
        tokio::select! {
            () = super::run_loops(collector, collectors, move || pods.clone()) => {}
            () = crate::run::shutdown_signal() => {}
        }
        Ok(String::new())
    })
}
