//! One re-resolution pass: list the pods of the namespaces in scope a page at a time, plan
//! each with the policy snapshot admission reads, and write only the pods whose answer
//! changed, paced by the token bucket, each write guarded by the resourceVersion it was
//! planned on.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use serde::Deserialize;

use super::elector::Leadership;
use super::event_post::{EventQueue, PodNote};
use super::pods;
use crate::live::state::{AppState, has_opt_in_label};
use crate::metrics::reresolve::{FailReason, ReresolveMetrics};
use crate::reresolve::plan::{PlannedChange, Verdict, plan_pod};
use crate::reresolve::rate::TokenBucket;
use crate::reresolve::stored_pod::{PodListPage, PodRef};
use crate::resolve::pod_input::{StrMap, Text};
use crate::triggers::Scope;

/// Patches in flight at once (all paced by the same bucket).
const WRITERS: usize = 4;
/// Attempts per pod: the planned write, then up to two re-plans after a 409.
const ATTEMPTS: usize = 3;

/// The token bucket, shared by every request of every pass.
pub struct Limiter(Mutex<TokenBucket>);

impl Limiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        Limiter(Mutex::new(TokenBucket::new(qps, burst, Instant::now())))
    }

    pub async fn acquire(&self) {
        let wait = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Everything a pass uses.
pub struct PassContext {
    pub client: kube::Client,
    pub state: Arc<AppState>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub leadership: Arc<Leadership>,
    pub limiter: Limiter,
    pub events: EventQueue,
    pub dry_run: bool,
    pub metrics: ReresolveMetrics,
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub namespaces: usize,
    pub checked: u64,
    pub patched: u64,
    /// Would have been patched (`--reresolve-dry-run`).
    pub dry_run: u64,
    pub failed: u64,
    /// Namespaces with pods that admission answered differently: retried.
    pub overridden: BTreeSet<String>,
    /// Leadership was lost: the pass stopped.
    pub aborted: bool,
}

/// What became of one planned write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteOutcome {
    Patched,
    DryRun,
    /// A fresh read after a conflict found nothing left to do (or the pod gone).
    NothingLeft,
    Overridden,
    Failed(FailReason),
    Aborted,
}

/// The stored pod's resolved-qos, read from a patch response.
#[derive(Deserialize)]
struct StoredAnnotations<'a> {
    #[serde(borrow, default)]
    metadata: StoredMetaAnnotations<'a>,
}

#[derive(Default, Deserialize)]
struct StoredMetaAnnotations<'a> {
    #[serde(borrow, default)]
    annotations: Option<StrMap<'a>>,
}

fn stored_resolved(body: &[u8]) -> Option<String> {
    let pod: StoredAnnotations<'_> = serde_json::from_slice(body).ok()?;
    pod.metadata
        .annotations?
        .get(ANNOTATION_RESOLVED_QOS)
        .map(Text::to_string)
}

impl PassContext {
    /// Opted-in namespaces (the label the MutatingWebhookConfiguration selects on), minus the
    /// ones never mutated.
    fn opted_in(&self) -> Vec<String> {
        self.namespaces
            .state()
            .iter()
            .filter(|ns| has_opt_in_label(ns.metadata.labels.as_ref()))
            .filter_map(|ns| ns.metadata.name.clone())
            .filter(|name| !self.state.namespaces.exempt.contains(name))
            .collect()
    }

    /// Whether the re-resolver writes pods of `namespace`: opted in and not exempt.
    pub fn is_in_scope(&self, namespace: &str) -> bool {
        !self.state.namespaces.exempt.iter().any(|n| n == namespace)
            && self
                .namespaces
                .get(&kube::runtime::reflector::ObjectRef::new(namespace))
                .is_some_and(|ns| has_opt_in_label(ns.metadata.labels.as_ref()))
    }

    /// One planned write outside a pass (the pod watch): the pass's guarded write, retried
    /// after a 409 with a fresh plan; its outcome is logged and counted there.
    pub async fn write_one(&self, pod: PodRef, change: PlannedChange) {
        let outcome = self.write(pod, change).await;
        tracing::debug!(?outcome, "resized pod written");
    }

    /// Runs one pass over `scope`.
    pub async fn run(&self, scope: &Scope) -> PassReport {
        let opted_in = self.opted_in();
        let namespaces = scope.select(opted_in.iter().map(String::as_str));
        let mut report = PassReport {
            namespaces: namespaces.len(),
            ..Default::default()
        };
        for namespace in namespaces {
            if !self.namespace(&namespace, &mut report).await {
                report.aborted = true;
                break;
            }
        }
        report
    }

    /// One namespace, page by page. False when leadership was lost.
    async fn namespace(&self, namespace: &str, report: &mut PassReport) -> bool {
        let mut token: Option<String> = None;
        loop {
            if !self.leadership.is_leader() {
                return false;
            }
            self.limiter.acquire().await;
            let body = match pods::list_page(&self.client, namespace, token.as_deref()).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(namespace, error = %e, "listing pods failed; namespace skipped this pass");
                    self.metrics.failed(FailReason::Api);
                    report.failed += 1;
                    return true;
                }
            };
            let (planned, next) = match serde_json::from_slice::<PodListPage<'_>>(&body) {
                Ok(page) => (
                    self.plan_page(&page, report),
                    page.next_page().map(str::to_owned),
                ),
                Err(e) => {
                    tracing::warn!(namespace, error = %e, "unreadable pod list; namespace skipped this pass");
                    self.metrics.failed(FailReason::Api);
                    report.failed += 1;
                    return true;
                }
            };
            drop(body);
            let outcomes: Vec<(String, WriteOutcome)> = futures::stream::iter(planned)
                .map(|(pod, change)| async move {
                    let ns = pod.namespace.clone();
                    (ns, self.write(pod, change).await)
                })
                .buffer_unordered(WRITERS)
                .collect()
                .await;
            for (ns, outcome) in outcomes {
                match outcome {
                    WriteOutcome::Patched => report.patched += 1,
                    WriteOutcome::DryRun => report.dry_run += 1,
                    WriteOutcome::NothingLeft => {}
                    WriteOutcome::Overridden => {
                        report.failed += 1;
                        report.overridden.insert(ns);
                    }
                    WriteOutcome::Failed(_) => report.failed += 1,
                    WriteOutcome::Aborted => return false,
                }
            }
            token = next;
            if token.is_none() {
                return true;
            }
        }
    }

    /// Plans every pod of a page with the current policy snapshot.
    fn plan_page(
        &self,
        page: &PodListPage<'_>,
        report: &mut PassReport,
    ) -> Vec<(PodRef, PlannedChange)> {
        let policy = self.state.policy.load();
        let mut out = Vec::new();
        for item in &page.items {
            report.checked += 1;
            self.metrics.pods_checked.inc();
            match plan_pod(item.get(), &policy) {
                Ok((pod, Verdict::Change(change))) => out.push((pod, change)),
                Ok((_, Verdict::Unchanged | Verdict::Skipped(_))) => {}
                Ok((pod, Verdict::Invalid(message))) => {
                    report.failed += 1;
                    self.metrics.failed(FailReason::Invalid);
                    tracing::debug!(namespace = %pod.namespace, pod = %pod.name, %message,
                        "pod does not resolve; left as it is");
                }
                Err(e) => {
                    report.failed += 1;
                    self.metrics.failed(FailReason::Api);
                    tracing::warn!(error = %e, "unreadable pod in a list");
                }
            }
        }
        out
    }

    /// Writes one planned change; after a 409 re-reads the pod and plans again.
    async fn write(&self, mut pod: PodRef, mut change: PlannedChange) -> WriteOutcome {
        if self.dry_run {
            self.metrics.pods_dry_run.inc();
            return WriteOutcome::DryRun;
        }
        for _ in 0..ATTEMPTS {
            self.limiter.acquire().await;
            // Checked after the wait, right before the write: the wait can be long.
            if !self.leadership.is_leader() {
                return WriteOutcome::Aborted;
            }
            let written = pods::json_patch(
                &self.client,
                &pod.namespace,
                &pod.name,
                change.patch.clone(),
            )
            .await;
            match written {
                Ok(stored) => return self.after_write(&pod, &change, &stored),
                Err(e) if pods::status_code(&e) == Some(404) => return WriteOutcome::NothingLeft,
                Err(e) if pods::status_code(&e) == Some(409) => match self.replan(&pod).await {
                    Ok(Some((fresh, next))) => {
                        pod = fresh;
                        change = next;
                    }
                    Ok(None) => return WriteOutcome::NothingLeft,
                    Err(outcome) => return outcome,
                },
                Err(e) => {
                    tracing::warn!(namespace = %pod.namespace, pod = %pod.name, error = %e,
                        "patching resolved-qos failed");
                    self.metrics.failed(FailReason::Api);
                    return WriteOutcome::Failed(FailReason::Api);
                }
            }
        }
        tracing::warn!(namespace = %pod.namespace, pod = %pod.name, attempts = ATTEMPTS,
            "still conflicting after re-reading; left for the next pass");
        self.metrics.failed(FailReason::Conflict);
        WriteOutcome::Failed(FailReason::Conflict)
    }

    /// A fresh read and a new plan: `None` when nothing is left to do.
    async fn replan(&self, pod: &PodRef) -> Result<Option<(PodRef, PlannedChange)>, WriteOutcome> {
        self.limiter.acquire().await;
        let body = match pods::get(&self.client, &pod.namespace, &pod.name).await {
            Ok(b) => b,
            Err(e) if pods::status_code(&e) == Some(404) => return Ok(None),
            Err(e) => {
                tracing::warn!(namespace = %pod.namespace, pod = %pod.name, error = %e,
                    "re-reading after a conflict failed");
                self.metrics.failed(FailReason::Api);
                return Err(WriteOutcome::Failed(FailReason::Api));
            }
        };
        let policy = self.state.policy.load();
        let text = std::str::from_utf8(&body).unwrap_or_default();
        match plan_pod(text, &policy) {
            Ok((fresh, Verdict::Change(change))) => Ok(Some((fresh, change))),
            Ok((_, Verdict::Unchanged | Verdict::Skipped(_))) => Ok(None),
            Ok((_, Verdict::Invalid(_))) => {
                self.metrics.failed(FailReason::Invalid);
                Err(WriteOutcome::Failed(FailReason::Invalid))
            }
            Err(_) => {
                self.metrics.failed(FailReason::Api);
                Err(WriteOutcome::Failed(FailReason::Api))
            }
        }
    }

    /// Admission ran on our write: the stored annotation must be the one planned. It is not
    /// when the policy moved between planning and admission: another replica whose watch has
    /// not delivered the new ConfigMap yet answers with the old policy, or a newer ConfigMap
    /// arrived here during the pass (its own pass follows). That pod is retried later.
    fn after_write(&self, pod: &PodRef, change: &PlannedChange, stored: &[u8]) -> WriteOutcome {
        if stored_resolved(stored).as_deref() != Some(change.annotation.as_str()) {
            tracing::info!(namespace = %pod.namespace, pod = %pod.name,
                "admission stored another resolved-qos than planned (the policy changed during the pass, or a replica has not seen the new ConfigMap yet); retrying");
            self.metrics.failed(FailReason::Overridden);
            return WriteOutcome::Overridden;
        }
        self.metrics.pods_patched.inc();
        self.events.post(PodNote {
            pod: pod.clone(),
            message: change.message.clone(),
        });
        WriteOutcome::Patched
    }
}
