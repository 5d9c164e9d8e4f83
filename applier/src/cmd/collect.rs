//! `koord-applier once -f PODS --collect`: one PSI round and one CPI window for the pod (or
//! every pod of a List), printed as the Prometheus text. With the hidden `--collect-serve ADDR`
//! it runs the collector loops on their intervals and serves `/metrics` there until SIGTERM or
//! SIGINT, for benchmarks and demos without an API server.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use koord_runtime::metrics::MetricError;
use tracing::Instrument as _;

use koord_translator::cgroup::detect::DetectError;
use koord_translator::cgroup::layout::Layout;

use super::manifest::{ManifestError, read_pods};
use crate::config::{Config, OnceConfig};
use crate::metrics::Metrics;
use crate::node::collectors::{
    Collector, CollectorMetrics, collect_once, node_name_for, run_loops, text_source,
};
use crate::server;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Layout(#[from] DetectError),
    #[error(transparent)]
    Pods(#[from] ManifestError),
    #[error("metrics listener {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Metrics(#[from] MetricError),
}

/// The Prometheus text of one round; with `--collect-serve`, the loops until a signal (then
/// empty).
pub fn run(config: &Config, once: &OnceConfig) -> Result<String, CollectError> {
    let layout = config.cgroup.layout()?;
    let pods = read_pods(&once.file)?;
    let collectors = &config.collectors;
    let Some(addr) = once.collect_serve else {
        return Ok(collect_once(layout, &config.sys_root, collectors, &pods)?);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CollectError::Runtime)?;
    rt.block_on(serve_loops(layout, config, pods, addr))?;
    Ok(String::new())
}

async fn serve_loops(
    layout: Layout,
    config: &Config,
    pods: Vec<Pod>,
    addr: SocketAddr,
) -> Result<(), CollectError> {
    let collectors = config.collectors.clone();
    let metrics = Arc::new(Metrics::new()?);
    let cm = CollectorMetrics::register(metrics.registry(), collectors.psi, collectors.cpi)?;
    let node = pods.first().map(node_name_for).unwrap_or_default();
    let collector = Arc::new(Mutex::new(Collector::new(
        layout,
        node,
        cm,
        &collectors,
        &config.sys_root,
    )));
    metrics.add_text_source(text_source(&collector));
    let listener = server::bind(addr)
        .await
        .map_err(|source| CollectError::Bind { addr, source })?;
    tokio::spawn(
        server::serve(
            listener,
            metrics,
            Arc::new(AtomicBool::new(true)),
            server::EndpointSettings::default(),
        )
        .instrument(tracing::info_span!("metrics_server")),
    );
    let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
    tracing::info!(%addr, pods = pods.len(), "collecting for a fixed pod list");
    tokio::select! {
        () = run_loops(collector, collectors, move || pods.clone())
            .instrument(tracing::info_span!("collectors")) => {}
        () = koord_runtime::shutdown_signal() => {}
    }
    Ok(())
}
