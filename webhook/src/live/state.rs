//! What every request reads: the policy snapshot, the namespace gate, limits, metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::Namespace;
use koord_api::keys::LABEL_WEBHOOK_OPT_IN;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use crate::policy::PolicyConfig;

/// The skip reason of a namespace the cache knows without the opt-in label.
pub const NOT_OPTED_IN: &str = "namespace has not opted in";

/// Which namespaces are never mutated.
///
/// `exempt` (kube-system and our own namespace) is checked by name. With a namespace cache
/// (in-cluster), a namespace the cache knows and that lacks the opt-in label is skipped too:
/// the MutatingWebhookConfiguration's namespaceSelector already filters at the apiserver, this
/// is defence in depth. A namespace the cache does not know yet is trusted to the selector,
/// and a negative answer from the cache is confirmed with the apiserver before a pod is
/// skipped (the label may have been added a moment ago: `kubectl label ns` then `apply`).
pub struct NamespaceGate {
    pub exempt: Vec<String>,
    pub opt_in: Option<Store<PartialObjectMeta<Namespace>>>,
}

pub fn has_opt_in_label(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(LABEL_WEBHOOK_OPT_IN))
        .is_some_and(|v| v == "enabled")
}

impl NamespaceGate {
    /// `check_cache` false: only the exempt names (after the apiserver confirmed the label).
    pub fn skip_reason(&self, namespace: &str, check_cache: bool) -> Option<&'static str> {
        if self.exempt.iter().any(|n| n == namespace) {
            return Some("exempt namespace");
        }
        if !check_cache {
            return None;
        }
        let store = self.opt_in.as_ref()?;
        let ns = store.get(&ObjectRef::new(namespace))?;
        (!has_opt_in_label(ns.metadata.labels.as_ref())).then_some(NOT_OPTED_IN)
    }
}

/// Readiness: true once every watched cache has listed (always true in standalone mode), and,
/// with self-managed certificates, while the served certificate verifies against the
/// published caBundle.
#[derive(Debug, Default)]
pub struct Readiness {
    cluster_config: AtomicBool,
    namespace_config: AtomicBool,
    namespaces: AtomicBool,
    /// Why the served certificate would not be accepted (`None`: it would, or not checked).
    certificate: std::sync::Mutex<Option<String>>,
    /// SIGTERM came: not ready whatever else holds, while admissions are still answered.
    draining: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
pub enum Cache {
    ClusterConfig,
    NamespaceConfig,
    Namespaces,
}

impl Readiness {
    pub fn all_ready() -> Self {
        Readiness {
            cluster_config: AtomicBool::new(true),
            namespace_config: AtomicBool::new(true),
            namespaces: AtomicBool::new(true),
            certificate: std::sync::Mutex::new(None),
            draining: AtomicBool::new(false),
        }
    }

    /// The server is shutting down: `/readyz` fails from now on, so the pod leaves the
    /// Service's endpoints while its listener still answers.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// One relaxed load: read on every admission.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Self-managed certificates: why kube-apiserver would refuse the served certificate.
    pub fn set_certificate_problem(&self, problem: Option<String>) {
        *self.certificate.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    pub fn certificate_problem(&self) -> Option<String> {
        self.certificate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn flag(&self, cache: Cache) -> &AtomicBool {
        match cache {
            Cache::ClusterConfig => &self.cluster_config,
            Cache::NamespaceConfig => &self.namespace_config,
            Cache::Namespaces => &self.namespaces,
        }
    }

    pub fn mark_synced(&self, cache: Cache) {
        self.flag(cache).store(true, Ordering::Release);
    }

    /// The caches not synced yet (empty when ready).
    pub fn pending(&self) -> Vec<&'static str> {
        [
            (Cache::ClusterConfig, "cluster ConfigMap"),
            (Cache::NamespaceConfig, "namespace ConfigMap"),
            (Cache::Namespaces, "namespaces"),
        ]
        .into_iter()
        .filter(|(c, _)| !self.flag(*c).load(Ordering::Acquire))
        .map(|(_, n)| n)
        .collect()
    }
}

/// Which ConfigMaps have had a valid version (or were confirmed absent) since start. Until
/// then the policy in force is the defaults rather than a last good configuration, and the
/// re-resolver must not rewrite pods with it.
#[derive(Debug, Default)]
pub struct PolicyLoaded {
    cluster: AtomicBool,
    namespace: AtomicBool,
}

impl PolicyLoaded {
    pub fn all_loaded() -> Self {
        PolicyLoaded {
            cluster: AtomicBool::new(true),
            namespace: AtomicBool::new(true),
        }
    }

    pub fn mark(&self, cache: Cache) {
        match cache {
            Cache::ClusterConfig => self.cluster.store(true, Ordering::Release),
            Cache::NamespaceConfig => self.namespace.store(true, Ordering::Release),
            Cache::Namespaces => {}
        }
    }

    /// The first ConfigMap without a valid version yet, if any.
    pub fn missing(&self) -> Option<&'static str> {
        if !self.cluster.load(Ordering::Acquire) {
            Some("cluster ConfigMap")
        } else if !self.namespace.load(Ordering::Acquire) {
            Some("namespace ConfigMap")
        } else {
            None
        }
    }
}

/// Request limits: the apiserver gives up after `timeoutSeconds`; we answer before that.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_concurrent: usize,
    pub deadline: Duration,
}

pub struct AppState {
    pub policy: ArcSwap<PolicyConfig>,
    /// Set in cluster mode once the client exists: confirms cache misses of the opt-in label.
    pub kube: std::sync::OnceLock<kube::Client>,
    pub namespaces: NamespaceGate,
    pub readiness: Readiness,
    pub policy_loaded: PolicyLoaded,
    pub metrics: Metrics,
    pub limits: Limits,
    /// Admissions reviewed at once (`--max-concurrent`): each holds at most one body.
    pub permits: Semaphore,
    /// Admissions waiting for the rest of their body, at most half the permits: a client that
    /// announces bodies and stalls (over HTTP/2, hundreds of streams per connection) can hold
    /// only these, never the permits that bodies sent with their head are reviewed under.
    pub body_waits: Semaphore,
    /// One large body (see `handler::LARGE_BODY_BYTES`) reviewed at a time, off the workers.
    pub large_bodies: Semaphore,
}

impl AppState {
    pub fn new(
        policy: PolicyConfig,
        namespaces: NamespaceGate,
        readiness: Readiness,
        metrics: Metrics,
        limits: Limits,
    ) -> Arc<Self> {
        Arc::new(AppState {
            policy: ArcSwap::from_pointee(policy),
            kube: std::sync::OnceLock::new(),
            namespaces,
            policy_loaded: if readiness.pending().is_empty() {
                PolicyLoaded::all_loaded()
            } else {
                PolicyLoaded::default()
            },
            readiness,
            metrics,
            permits: Semaphore::new(limits.max_concurrent.max(1)),
            body_waits: Semaphore::new((limits.max_concurrent / 2).max(1)),
            large_bodies: Semaphore::new(1),
            limits,
        })
    }
}
