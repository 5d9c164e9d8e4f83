//! The two commands, wired from their parts.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::sync::mpsc;

use crate::apply::Applier;
use crate::cli::{Config, ConfigError, RunConfig};
use crate::event_sink;
use crate::metrics::Metrics;
use crate::once::{OnceError, once};
use crate::pods::Watch;
use crate::report::{PodReport, PodStatus};
use crate::server;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Once(#[from] OnceError),
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Collectors(#[from] crate::collectors::command::CollectError),
    #[error("metrics listener {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// `koord-applier once`.
pub fn once_command(config: &Config, file: &Path) -> Result<PodReport, RunError> {
    let layout = config.layout()?;
    let caps = crate::nodeqos::detect_caps(&layout, config.cpu_idle_fallback);
    let applier = Applier::new(layout, config.dry_run, None).with_caps(caps);
    let mut report = once(&applier, file)?;
    if let Some(support) = crate::nodeqos::detect_resctrl(&config.resctrl_root, None) {
        let node = crate::nodeqos::NodeQos::new(
            applier.layout().clone(),
            config.dry_run,
            caps,
            Some((config.resctrl_root.clone(), support)),
            None,
        );
        let pod = crate::once::read_pod(file)?;
        if let Ok(view) = crate::podview::PodView::from_pod(&pod) {
            let r = node.once(&view);
            report.resctrl = r.resctrl;
            if let Some(e) = r.resctrl_error {
                report.status = PodStatus::Failed;
                report.reason = Some(match report.reason.take() {
                    Some(prev) => format!("{prev}; resctrl: {e}"),
                    None => format!("resctrl: {e}"),
                });
            }
        }
    }
    if !config.dry_run {
        report.locality = crate::numa::locality::once_locality(
            applier.layout().clone(),
            &config.proc_root,
            &config.sys_root,
            config.locality,
            file,
        );
    }
    Ok(report)
}

/// 0 when the pod is as the annotation says (or unmanaged), 2 when it was refused or failed
/// (a failed memory locality pass included).
pub fn exit_code(report: &PodReport) -> i32 {
    if report.locality.as_ref().is_some_and(|l| l.failed()) {
        return 2;
    }
    match report.status {
        PodStatus::Applied | PodStatus::Unchanged | PodStatus::Unmanaged => 0,
        PodStatus::Refused | PodStatus::Failed => 2,
    }
}

/// Everything `run` starts, given a client (tests pass a mocked one).
pub async fn run_with_client(
    config: Config,
    run: RunConfig,
    client: kube::Client,
) -> Result<(), RunError> {
    let layout = config.layout()?;
    tracing::info!(root = %layout.root.display(), version = %layout.version, driver = %layout.driver, node = %run.node_name, "starting");
    let metrics = Arc::new(Metrics::new());
    // The Performance Collector reads the watch's pod cache (no second watch).
    let (store, writer) = kube::runtime::reflector::store::<Pod>();
    crate::collectors::command::spawn_for_run(
        layout.clone(),
        &config.sys_root,
        &run.node_name,
        &metrics,
        &config.collectors,
        store.clone(),
    )?;
    let caps = crate::nodeqos::detect_caps(&layout, config.cpu_idle_fallback);
    let resctrl = crate::nodeqos::detect_resctrl(&config.resctrl_root, Some(&metrics))
        .map(|s| (config.resctrl_root.clone(), s));
    let node_qos = Arc::new(crate::nodeqos::NodeQos::new(
        layout.clone(),
        config.dry_run,
        caps,
        resctrl,
        Some(metrics.clone()),
    ));
    let applier =
        Arc::new(Applier::new(layout, config.dry_run, Some(metrics.clone())).with_caps(caps));
    let ready = Arc::new(AtomicBool::new(false));
    let listener = server::bind(run.metrics_addr)
        .await
        .map_err(|source| RunError::Bind {
            addr: run.metrics_addr,
            source,
        })?;
    tokio::spawn(server::serve(listener, metrics.clone(), ready.clone()));
    let (tx, rx) = mpsc::channel(1024);
    // Memory locality reads the same pod cache and posts through the same Event sink.
    if config.dry_run {
        tracing::info!("dry run: memory locality passes are off");
    } else {
        crate::numa::worker::spawn_for_run(
            crate::numa::locality::Migrator::new(
                applier.layout().clone(),
                config.proc_root.clone(),
                config.sys_root.clone(),
                config.locality,
            ),
            store.clone(),
            tx.clone(),
            metrics.registry(),
        );
    }
    // Colocation: batch capacity on the Node and BE suppression, from the same pod cache.
    if config.dry_run {
        tracing::info!("dry run: colocation is off");
    } else {
        crate::colocation::spawn_for_run(
            client.clone(),
            applier.layout().clone(),
            config.proc_root.clone(),
            &run.node_name,
            run.colocation.clone(),
            store.clone(),
            metrics.registry(),
        );
    }
    tokio::spawn(event_sink::publish(
        client.clone(),
        run.node_name.clone(),
        rx,
        run.event_window,
        metrics,
    ));
    let watch = Watch {
        applier,
        node_qos: Some(node_qos),
        events: tx,
        resync: run.resync,
        ready,
    };
    let api: Api<Pod> = Api::all(client);
    tokio::select! {
        () = watch.run_with_store(api, &run.node_name, store, writer) => {}
        () = shutdown_signal() => tracing::info!("signalled; exiting"),
    }
    Ok(())
}

/// SIGTERM (the kubelet stopping the pod) or SIGINT.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// `koord-applier run`: in-cluster or kubeconfig credentials.
pub async fn run(config: Config, run: RunConfig) -> Result<(), RunError> {
    let client = kube::Client::try_default().await?;
    run_with_client(config, run, client).await
}
