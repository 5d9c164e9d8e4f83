//! The re-resolver: brings the `koordinator.sh/resolved-qos` of running pods up to date when
//! the policy changes, so a ConfigMap edit reaches the pods of the cluster, not only the pods
//! admitted after it (in-cluster mode; never with `--standalone`).
//!
//! - One replica at a time writes: the holder of a `coordination.k8s.io/v1` Lease
//!   ([`elector`]). Admission never depends on the Lease.
//! - A pass runs on a new valid ConfigMap version that changes the policy, on a namespace
//!   gaining the opt-in label, on becoming the holder, and every `--reresolve-interval`; a
//!   burst of triggers within `--reresolve-debounce` is one pass.
//! - A pass resolves each pod with the policy snapshot admission reads and the function
//!   admission calls ([`crate::pod_patch`]), and patches only pods whose answer changed
//!   ([`pass`]).
//! - Between passes the holder watches pods: one whose allocated memory changed (an in-place
//!   resize, which no admission of the pod sees) is planned and patched at once
//!   ([`resize_watch`]).

mod config;
pub mod elector;
mod event_post;
mod pass;
mod pods;
mod resize_watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

pub use config::{LeaseConfig, ReresolveArgs, ReresolveConfig, ReresolveConfigError};
pub use elector::Leadership;
pub use event_post::{REPORTING_CONTROLLER, to_k8s_event};
pub use pods::FIELD_MANAGER;

use metrics::PassOutcome;
use pass::{Limiter, PassContext, PassReport};

use crate::live::state::AppState;
use crate::reresolve::scope::{Pending, trigger_names};
use crate::triggers::{Scope, Trigger};

// At their old paths: the re-resolver's metrics live with the webhook's other families, the
// channel from the watches to the driver in `crate::triggers`, below both.
pub use crate::metrics::reresolve as metrics;
pub use crate::triggers::{Triggers, triggers};

/// Retries of pods that admission answered differently, before the next trigger.
const MAX_RETRY_ROUNDS: u32 = 3;
/// The first retry's delay; doubled each round.
const RETRY_DELAY: Duration = Duration::from_secs(2);

/// The running re-resolver.
pub struct Running {
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    pub fn finish(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The running Lease loop: the one writer for the re-resolver and the self-managed
/// certificates.
pub struct Election {
    pub leadership: Arc<Leadership>,
    elector: JoinHandle<()>,
    stop: Arc<Notify>,
}

impl Election {
    /// Spawns the Lease loop in a `leader-election` span.
    pub fn spawn(
        client: kube::Client,
        lease: LeaseConfig,
        metrics: metrics::ReresolveMetrics,
    ) -> Self {
        let stop = Arc::new(Notify::new());
        let leadership = Leadership::new(lease.identity.clone(), lease.timing);
        let elector = tokio::spawn(
            elector::run(client, lease, leadership.clone(), metrics, stop.clone())
                .instrument(tracing::info_span!("leader-election")),
        );
        Election {
            leadership,
            elector,
            stop,
        }
    }

    /// Stops it: the Lease is released (within a few seconds at most) so another replica
    /// takes over at once instead of after the lease duration.
    pub async fn finish(self) {
        self.stop.notify_one();
        let elector = self.elector.abort_handle();
        if tokio::time::timeout(RELEASE_TIMEOUT, self.elector)
            .await
            .is_err()
        {
            elector.abort();
        }
    }
}

/// How long shutdown waits for the Lease to be released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Spawns the Event publisher and the re-resolver, each in a span naming it
/// (`reresolve-events`, `reresolve`); `leadership` comes from the [`Election`].
pub fn spawn(
    client: kube::Client,
    state: Arc<AppState>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    config: ReresolveConfig,
    triggers: (Triggers, mpsc::UnboundedReceiver<(Trigger, Scope)>),
    leadership: Arc<Leadership>,
) -> Running {
    let metrics = state.metrics.reresolve.clone();
    tracing::info!(
        identity = %config.lease.identity, lease = %config.lease.name,
        namespace = %config.lease.namespace, dry_run = config.dry_run,
        interval_seconds = config.interval.as_secs(), qps = config.qps, burst = config.burst,
        "re-resolver enabled"
    );
    // The Lease may have been won before the driver first polls (the election runs
    // already): marked changed, its first poll looks at the current state either way.
    let mut leader = leadership.subscribe();
    leader.mark_changed();
    let (events, publisher) = event_post::spawn(
        client.clone(),
        config.lease.identity.clone(),
        config.event_window,
        config.qps,
        config.burst,
        metrics.clone(),
    );
    let (tx, rx) = triggers;
    let ctx = Arc::new(PassContext {
        client,
        state,
        namespaces,
        leadership,
        limiter: Limiter::new(config.qps, config.burst),
        events,
        dry_run: config.dry_run,
        metrics,
    });
    let resizes = tokio::spawn(
        resize_watch::run(ctx.clone()).instrument(tracing::info_span!("reresolve-resize")),
    );
    let driver = Driver {
        ctx,
        config,
        triggers: tx,
        retry_round: 0,
    };
    let driver = tokio::spawn(
        driver
            .run(rx, leader)
            .instrument(tracing::info_span!("reresolve")),
    );
    Running {
        tasks: vec![publisher, driver, resizes],
    }
}

struct Driver {
    ctx: Arc<PassContext>,
    config: ReresolveConfig,
    /// To schedule retries.
    triggers: Triggers,
    retry_round: u32,
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<(Trigger, Scope)>,
        mut leader: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut pending = Pending::default();
        let interval = self.config.interval;
        let mut periodic =
            tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        periodic.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some((t, s)) => pending.add(t, s),
                    None => return,
                },
                _ = periodic.tick() => pending.add(Trigger::Periodic, Scope::All),
                changed = leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *leader.borrow_and_update() {
                        pending.add(Trigger::Elected, Scope::All);
                    }
                }
            }
            if !self.ctx.leadership.is_leader() {
                // Followers keep nothing: the holder to come starts with a full pass.
                pending = Pending::default();
                continue;
            }
            let until = tokio::time::Instant::now() + self.config.debounce;
            loop {
                tokio::select! {
                    msg = rx.recv() => match msg {
                        Some((t, s)) => pending.add(t, s),
                        None => return,
                    },
                    _ = tokio::time::sleep_until(until) => break,
                }
            }
            self.wait_for_caches().await;
            let Some((triggers, scope)) = pending.take() else {
                continue;
            };
            self.pass(&triggers, &scope).await;
        }
    }

    /// Until the ConfigMaps and Namespaces have listed: before that the policy is the defaults.
    async fn wait_for_caches(&self) {
        while !self.ctx.state.readiness.pending().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn pass(&mut self, triggers: &[Trigger], scope: &Scope) {
        let names = trigger_names(triggers);
        let metrics = &self.ctx.metrics;
        if let Some(config) = self.ctx.state.policy_loaded.missing() {
            // Without one valid version since start, the policy in force is the defaults, not
            // the last good configuration: re-resolving with it would change pods for nothing.
            metrics.pass(triggers, PassOutcome::WaitingForConfig);
            tracing::warn!(trigger = %names, config,
                "no valid version of the ConfigMap since start; re-resolution waits for one");
            return;
        }
        let started = Instant::now();
        let report = self.ctx.run(scope).await;
        let elapsed = started.elapsed();
        let outcome = if report.aborted {
            PassOutcome::Aborted
        } else {
            PassOutcome::Completed
        };
        metrics.pass(triggers, outcome);
        metrics.pass_duration.observe(elapsed.as_secs_f64());
        log_pass(
            &names,
            scope,
            &report,
            elapsed,
            outcome,
            self.config.dry_run,
        );
        self.schedule_retry(&report);
    }

    /// Pods that admission answered differently are tried again, a few times, later.
    fn schedule_retry(&mut self, report: &PassReport) {
        if report.overridden.is_empty() {
            self.retry_round = 0;
            return;
        }
        if self.retry_round >= MAX_RETRY_ROUNDS {
            tracing::warn!(
                namespaces = report.overridden.len(),
                "admission keeps answering differently; left for the next trigger or periodic pass"
            );
            self.retry_round = 0;
            return;
        }
        let delay = RETRY_DELAY * 2u32.pow(self.retry_round);
        self.retry_round += 1;
        let triggers = self.triggers.clone();
        let scope = Scope::Namespaces(report.overridden.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            triggers.send(Trigger::Retry, scope);
        });
    }
}

fn log_pass(
    trigger: &str,
    scope: &Scope,
    r: &PassReport,
    elapsed: Duration,
    outcome: PassOutcome,
    dry_run: bool,
) {
    let scope = match scope {
        Scope::All => "all".to_owned(),
        Scope::Namespaces(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
    };
    tracing::info!(
        trigger, scope = %scope, namespaces = r.namespaces, checked = r.checked,
        patched = r.patched, would_patch = r.dry_run, failed = r.failed, dry_run,
        duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        outcome = outcome.label(), "re-resolve pass"
    );
}
