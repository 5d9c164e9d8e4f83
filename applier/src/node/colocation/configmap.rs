//! The cluster ConfigMap holding `colocation-config` and `resource-threshold-config`: watched
//! (one object, by name) and applied to the shared config, keeping the last good value of a
//! key that does not parse.

use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};

use super::config::{self, ConfigState};
use super::metrics::ColocationMetrics;

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
pub async fn watch_configmap(
    api: Api<ConfigMap>,
    name: String,
    state: Arc<Mutex<ConfigState>>,
    metrics: ColocationMetrics,
) {
    // Renewed under the client's read timeout, which is set from this length.
    let cfg = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(koord_runtime::WATCH_TIMEOUT_SECS);
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
