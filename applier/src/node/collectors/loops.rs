//! The collectors inside a long-running process: the PSI and CPI loops on their intervals, and
//! the renderer that appends the per-cgroup series to `/metrics`.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use tracing::Instrument as _;

use super::collector::Collector;
use super::gates::CollectorConfig;

/// A collector shared by its loops and the `/metrics` renderer.
pub type SharedCollector = Arc<Mutex<Collector>>;

/// The renderer to hand to [`crate::metrics::Metrics::add_text_source`].
pub fn text_source(c: &SharedCollector) -> crate::metrics::TextSource {
    let c = c.clone();
    Box::new(move |out: &mut String| lock(&c).render_text(out))
}

fn lock(c: &Mutex<Collector>) -> std::sync::MutexGuard<'_, Collector> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the PSI and CPI loops forever on their intervals; `pods` gives the current pod list
/// each round (the reflector's store in `run`, a fixed list otherwise).
pub async fn run_loops<F>(collector: SharedCollector, config: CollectorConfig, pods: F)
where
    F: Fn() -> Vec<Arc<Pod>> + Send + Sync + 'static,
{
    let (psi_on, cpi_on) = {
        let c = lock(&collector);
        (c.psi_active(), c.cpi_active())
    };
    let pods = Arc::new(pods);
    let psi = {
        let (collector, pods) = (collector.clone(), pods.clone());
        async move {
            if !psi_on {
                return;
            }
            let mut tick = tokio::time::interval(config.psi_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let (c, p) = (collector.clone(), pods.clone());
                let span = tracing::Span::current();
                let _ = tokio::task::spawn_blocking(move || {
                    let _in_round = span.enter();
                    let list = p();
                    let mut c = lock(&c);
                    c.sync(list.iter().map(|p| &**p));
                    c.collect_psi()
                })
                .await;
            }
        }
    };
    let cpi = async move {
        if !cpi_on {
            return;
        }
        let mut tick = tokio::time::interval(config.cpi_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            loop {
                let (c, p) = (collector.clone(), pods.clone());
                let span = tracing::Span::current();
                let Ok(Some(window)) = tokio::task::spawn_blocking(move || {
                    let _in_round = span.enter();
                    let list = p();
                    let mut c = lock(&c);
                    c.sync(list.iter().map(|p| &**p));
                    c.start_cpi()
                })
                .await
                else {
                    break;
                };
                tokio::time::sleep(config.cpi_window).await;
                let remaining = window.remaining;
                let c = collector.clone();
                let _ = tokio::task::spawn_blocking(move || lock(&c).finish_cpi(window)).await;
                if remaining == 0 {
                    break;
                }
            }
        }
    };
    tokio::join!(
        psi.instrument(tracing::info_span!("psi")),
        cpi.instrument(tracing::info_span!("cpi"))
    );
}
