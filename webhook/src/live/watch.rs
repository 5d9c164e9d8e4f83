//! Live configuration: kube reflectors on the two ConfigMaps and on Namespaces (metadata only:
//! admission needs a namespace's labels, nothing else).
//!
//! Each ConfigMap change is parsed once, off the request path, and swapped into the policy
//! snapshot; admission only ever loads an `Arc`. A ConfigMap that does not parse keeps the
//! last good configuration, is logged and counted (docs/contract.md §4). A deleted ConfigMap
//! means the defaults.
//! A version that changes the policy, and a namespace gaining the opt-in label, are sent to the
//! re-resolver as triggers (it then re-resolves the running pods with the same snapshot).
//! The watchers re-list and re-watch with backoff, so they survive an apiserver restart.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::watcher::{self, Event, watcher};
use tracing::Instrument as _;

use super::state::{AppState, Cache, has_opt_in_label};
use crate::metrics::ConfigSource;
use crate::policy::load::from_data;
use crate::policy::{
    ClusterConfigMap, ConfigMapPolicy, FieldError, NamespaceConfigMap, ParseOutcome, PolicyConfig,
};
use crate::triggers::{OptInTracker, Scope, Trigger, Triggers, config_change};
use koord_runtime::WATCH_TIMEOUT_SECS;

/// A watch of one object by name, renewed every [`WATCH_TIMEOUT_SECS`].
pub fn named_watch_config(name: &str) -> watcher::Config {
    watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_TIMEOUT_SECS)
}

/// Where the two ConfigMaps live.
#[derive(Debug, Clone)]
pub struct ConfigMapNames {
    pub namespace: String,
    pub cluster: String,
    pub pod: String,
}

/// Applies one ConfigMap version (or its absence) to the policy snapshot. Runs in the watch's
/// `config-watch{configmap=...}` span, which names the ConfigMap in every line.
fn apply_configmap(
    state: &AppState,
    source: ConfigSource,
    data: Option<&BTreeMap<String, String>>,
    triggers: &Triggers,
) {
    let empty = BTreeMap::new();
    let data = data.unwrap_or(&empty);
    match source {
        ConfigSource::Cluster => {
            apply_parsed(state, source, from_data::<ClusterConfigMap>(data), triggers)
        }
        ConfigSource::Namespace => apply_parsed(
            state,
            source,
            from_data::<NamespaceConfigMap>(data),
            triggers,
        ),
    }
}

/// Swaps a parsed ConfigMap into the snapshot, or keeps the last good one when it did not parse.
/// A swap that changes the policy asks the re-resolver for a pass.
fn apply_parsed<C: ConfigMapPolicy + Clone>(
    state: &AppState,
    source: ConfigSource,
    parsed: Result<ParseOutcome<C>, FieldError>,
    triggers: &Triggers,
) {
    match parsed {
        Ok(out) => {
            let before = state.policy.rcu(|old| {
                let mut next = PolicyConfig::clone(old);
                out.config.clone().store(&mut next);
                next
            });
            state.policy_loaded.mark(match source {
                ConfigSource::Cluster => Cache::ClusterConfig,
                ConfigSource::Namespace => Cache::NamespaceConfig,
            });
            if let Some((trigger, scope)) = config_change(&before, &state.policy.load()) {
                triggers.send(trigger, scope);
            }
            state.metrics.config_parsed(source, true);
            for note in out.notes {
                tracing::info!(note = %note, "configuration note");
            }
            tracing::info!("configuration applied");
        }
        Err(e) => {
            state.metrics.config_parsed(source, false);
            tracing::error!(error = %e, "ConfigMap rejected; keeping the last good configuration");
        }
    }
}

fn find<'s>(store: &'s [Arc<ConfigMap>], name: &str) -> Option<&'s Arc<ConfigMap>> {
    store
        .iter()
        .find(|cm| cm.metadata.name.as_deref() == Some(name))
}

/// Watches one ConfigMap by name until the stream ends (it does not: errors back off).
async fn watch_configmap(
    client: kube::Client,
    state: Arc<AppState>,
    namespace: String,
    name: String,
    source: ConfigSource,
    cache: Cache,
    triggers: Triggers,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = named_watch_config(&name);
    let (reader, writer) = reflector::store();
    let mut stream = std::pin::pin!(reflector(writer, watcher(api, config)).default_backoff());
    // The resourceVersion last applied, so a re-list after a reconnect re-applies nothing.
    let mut applied: Option<Option<String>> = None;
    let mut synced = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::InitDone) => synced = true,
            Ok(Event::Apply(_) | Event::Delete(_)) if synced => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "ConfigMap watch error; retrying");
                continue;
            }
        }
        let state_now = reader.state();
        let current = find(&state_now, &name);
        let version = current.map(|cm| cm.metadata.resource_version.clone().unwrap_or_default());
        if applied.as_ref() == Some(&version) {
            state.readiness.mark_synced(cache);
            continue;
        }
        if current.is_none() {
            tracing::info!(namespace = %namespace, "ConfigMap absent: defaults");
        }
        apply_configmap(
            &state,
            source,
            current.and_then(|cm| cm.data.as_ref()),
            &triggers,
        );
        applied = Some(version);
        state.readiness.mark_synced(cache);
    }
}

/// Feeds the namespace store (labels only), marks it synced after the first list, and sends
/// the re-resolver a trigger for a namespace that gains the opt-in label (also one that
/// gained it while the watch was disconnected: the re-list shows it).
async fn watch_namespaces<S>(stream: S, state: Arc<AppState>, triggers: Triggers)
where
    S: Stream<Item = Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut opt_in = OptInTracker::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::InitDone) => {
                opt_in.listed();
                state.readiness.mark_synced(Cache::Namespaces);
            }
            Ok(Event::Apply(ns) | Event::InitApply(ns)) => {
                let Some(name) = ns.metadata.name.as_deref() else {
                    continue;
                };
                if opt_in.observe(name, has_opt_in_label(ns.metadata.labels.as_ref())) {
                    triggers.send(Trigger::NamespaceOptIn, Scope::one(name));
                }
            }
            Ok(Event::Delete(ns)) => {
                if let Some(name) = ns.metadata.name.as_deref() {
                    opt_in.forget(name);
                }
            }
            Ok(Event::Init) => {}
            Err(e) => tracing::warn!(error = %e, "Namespace watch error; retrying"),
        }
    }
}

/// A namespace store for the [`super::state::NamespaceGate`] and the writer that fills it.
pub fn namespace_store() -> (
    Store<PartialObjectMeta<Namespace>>,
    reflector::store::Writer<PartialObjectMeta<Namespace>>,
) {
    reflector::store()
}

/// Spawns the three watches, each in a span naming it (`config-watch{configmap=...}`,
/// `namespace-watch`).
pub fn spawn_watches(
    client: kube::Client,
    state: Arc<AppState>,
    names: ConfigMapNames,
    namespace_writer: reflector::store::Writer<PartialObjectMeta<Namespace>>,
    triggers: Triggers,
) -> Vec<tokio::task::JoinHandle<()>> {
    let namespaces = reflector(
        namespace_writer,
        watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default().timeout(WATCH_TIMEOUT_SECS),
        ),
    )
    .default_backoff();
    let cluster_span = tracing::info_span!("config-watch", configmap = %names.cluster);
    let pod_span = tracing::info_span!("config-watch", configmap = %names.pod);
    vec![
        tokio::spawn(
            watch_configmap(
                client.clone(),
                state.clone(),
                names.namespace.clone(),
                names.cluster,
                ConfigSource::Cluster,
                Cache::ClusterConfig,
                triggers.clone(),
            )
            .instrument(cluster_span),
        ),
        tokio::spawn(
            watch_configmap(
                client,
                state.clone(),
                names.namespace,
                names.pod,
                ConfigSource::Namespace,
                Cache::NamespaceConfig,
                triggers.clone(),
            )
            .instrument(pod_span),
        ),
        tokio::spawn(
            watch_namespaces(namespaces, state, triggers)
                .instrument(tracing::info_span!("namespace-watch")),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_watches_are_renewed_every_minute() {
        let c = named_watch_config("ack-slo-config");
        assert_eq!(
            c.field_selector.as_deref(),
            Some("metadata.name=ack-slo-config")
        );
        assert_eq!(c.timeout, Some(WATCH_TIMEOUT_SECS));
    }
}
