//! One PSI round and one CPI window for a fixed pod list, printed as the Prometheus text
//! (`koord-applier once --collect`), and the node name such a run labels its series with.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use koord_runtime::metrics::MetricError;

use koord_translator::cgroup::layout::Layout;

use super::collector::Collector;
use super::gates::CollectorConfig;
use super::metrics::CollectorMetrics;

/// The node name for labels outside `run`: the pod's `spec.nodeName`, else `$NODE_NAME`, else
/// the kernel's host name.
pub fn node_name_for(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default()
}

/// `once --collect`: one PSI round and one CPI window for `pods`, then the text exposition of
/// the collectors' families.
pub fn collect_once(
    layout: Layout,
    sys_root: &Path,
    config: &CollectorConfig,
    pods: &[Pod],
) -> Result<String, MetricError> {
    let registry = prometheus::Registry::new();
    let metrics = CollectorMetrics::register(&registry, config.psi, config.cpi)?;
    let node = pods.first().map(node_name_for).unwrap_or_default();
    let mut c = Collector::new(layout, node, metrics, config, sys_root);
    c.sync(pods.iter());
    c.collect_psi();
    c.collect_cpi_blocking(config.cpi_window);
    let mut text = koord_runtime::metrics::render(&registry);
    c.render_text(&mut text);
    Ok(text)
}
