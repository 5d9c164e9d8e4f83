//! The Lease loop: one replica at a time may re-resolve (decisions in
//! [`crate::reresolve::lease`]). Admission never looks at the Lease: a replica that is not the
//! holder serves admissions exactly like the holder.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::{Notify, watch};

use super::config::LeaseConfig;
use crate::metrics::reresolve::ReresolveMetrics;
use crate::reresolve::lease::{
    LeaseAction, LeaseTiming, Observed, decide, may_act, next_look, next_spec, released_spec,
};

/// Whether this replica may write now, shared by the Lease loop and the re-resolver.
pub struct Leadership {
    identity: String,
    timing: LeaseTiming,
    /// When the last successful renewal started.
    renewed: Mutex<Option<Instant>>,
    changed: watch::Sender<bool>,
}

impl Leadership {
    pub fn new(identity: String, timing: LeaseTiming) -> Arc<Self> {
        Arc::new(Leadership {
            identity,
            timing,
            renewed: Mutex::new(None),
            changed: watch::channel(false).0,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// True while the last successful renewal is younger than the renew deadline: checked
    /// before every write, so a holder cut off from the API server stops on time even between
    /// two turns of the Lease loop.
    pub fn is_leader(&self) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        may_act(renewed, Instant::now(), &self.timing)
    }

    /// Wakes on every change of [`Self::is_leader`] as the Lease loop sees it.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changed.subscribe()
    }

    fn set_renewed(&self, at: Option<Instant>) {
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// Publishes the current state; true when it changed.
    fn publish(&self) -> bool {
        let now = self.is_leader();
        self.changed.send_if_modified(|v| {
            let changed = *v != now;
            *v = now;
            changed
        })
    }
}

#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("no answer within {0:?} (the renew deadline)")]
    LookTimedOut(Duration),
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// What one look at the Lease found.
struct Look {
    /// We hold the Lease.
    held: bool,
    /// The wait before the next look.
    next: Duration,
}

/// One look at the Lease: create, take or renew it when we may.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<Look, LeaseError> {
    let lease = api.get_opt(&config.name).await?;
    let now = Instant::now();
    let spec = lease.as_ref().map(|l| l.spec.clone().unwrap_or_default());
    if let Some(s) = &spec {
        *observed = Some(Observed::update(observed.take(), s, now));
    }
    let me = config.identity.as_str();
    let action = decide(me, spec.as_ref(), observed.as_ref(), now, &config.timing);
    let next = next_look(&action, &config.timing);
    if let LeaseAction::Wait { .. } = action {
        return Ok(Look { held: false, next });
    }
    let record = next_spec(&action, me, spec.as_ref(), Timestamp::now(), &config.timing);
    let written = match lease {
        None => {
            let new = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(record.clone()),
            };
            api.create(&PostParams::default(), &new).await
        }
        Some(mut lease) => {
            // metadata.resourceVersion is the one just read: a concurrent writer makes this a
            // 409, never a second holder.
            lease.spec = Some(record.clone());
            api.replace(&config.name, &PostParams::default(), &lease)
                .await
        }
    };
    match written {
        Ok(_) => {
            *observed = Some(Observed::update(observed.take(), &record, now));
            Ok(Look { held: true, next })
        }
        Err(e) if is_conflict(&e) => Ok(Look { held: false, next }),
        Err(e) => Err(e.into()),
    }
}

/// Hands the Lease back if we hold it, so another replica takes over at once.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), LeaseError> {
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(());
    };
    let spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    lease.spec = Some(released_spec(&spec, Timestamp::now()));
    api.replace(&config.name, &PostParams::default(), &lease)
        .await?;
    Ok(())
}

/// Runs the Lease loop until SIGTERM/SIGINT (at once, not after the admission drain: the next
/// replica takes over while this one finishes its requests) or `stop`, then releases the Lease.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leadership: Arc<Leadership>,
    metrics: ReresolveMetrics,
    stop: Arc<Notify>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed = None;
    let mut shutdown = std::pin::pin!(async {
        tokio::select! {
            _ = koord_runtime::shutdown_signal() => {}
            _ = stop.notified() => {}
        }
    });
    loop {
        let started = Instant::now();
        // kube's client retries a 503 or 429 by itself, with a backoff that grows to minutes:
        // one look left to it could still be sleeping long after the API server is back, and a
        // released Lease would wait for it. A look gets the renew deadline (a holder whose look
        // takes longer may not act anyway); then this loop, not the client, tries again.
        let look = tokio::time::timeout(
            config.timing.renew_deadline,
            try_acquire_or_renew(&api, &config, &mut observed),
        )
        .await
        .unwrap_or(Err(LeaseError::LookTimedOut(config.timing.renew_deadline)));
        let next = match look {
            Ok(look) => {
                leadership.set_renewed(look.held.then_some(started));
                look.next
            }
            // The renewal time stays as it was: the deadline ends our turn if this lasts.
            Err(e) => {
                tracing::warn!(error = %e, lease = %config.name, "Lease unreachable");
                config.timing.retry_period
            }
        };
        if leadership.publish() {
            let leader = leadership.is_leader();
            metrics.leader_transitions.inc();
            metrics.is_leader.set(i64::from(leader));
            let holder = observed.as_ref().and_then(Observed::holder).unwrap_or("");
            tracing::info!(
                identity = %config.identity, lease = %config.name, leader, holder,
                "re-resolver leadership changed"
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = &mut shutdown => break,
        }
    }
    let was_leader = leadership.is_leader();
    leadership.set_renewed(None);
    leadership.publish();
    metrics.is_leader.set(0);
    if was_leader {
        let deadline = config.timing.renew_deadline;
        let released = tokio::time::timeout(deadline, release(&api, &config))
            .await
            .unwrap_or(Err(LeaseError::LookTimedOut(deadline)));
        match released {
            Ok(()) => tracing::info!(lease = %config.name, "Lease released"),
            Err(e) => {
                tracing::warn!(error = %e, lease = %config.name, "could not release the Lease; it expires by itself")
            }
        }
    }
}
