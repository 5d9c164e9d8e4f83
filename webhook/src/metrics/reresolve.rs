//! `koord_webhook_reresolve_*`: what the re-resolver checked, wrote and failed, how long its
//! passes take and whether this replica holds the Lease. Registered on the webhook's registry,
//! label sets resolved at start.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::triggers::Trigger;

/// Why a pod was not brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// Still conflicting after the retries with a fresh read.
    Conflict,
    /// Its annotations do not resolve (admission denies any update of it).
    Invalid,
    /// The API server refused or could not be reached.
    Api,
    /// Admission stored another answer (a replica whose policy lagged); retried.
    Overridden,
}

impl FailReason {
    const ALL: [FailReason; 4] = [Self::Conflict, Self::Invalid, Self::Api, Self::Overridden];

    fn label(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Invalid => "invalid",
            Self::Api => "api",
            Self::Overridden => "overridden",
        }
    }
}

/// How a pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOutcome {
    Completed,
    /// Leadership was lost during the pass.
    Aborted,
    /// Not run: a ConfigMap has not had a valid version since this process started.
    WaitingForConfig,
}

impl PassOutcome {
    const ALL: [PassOutcome; 3] = [Self::Completed, Self::Aborted, Self::WaitingForConfig];

    pub fn label(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Aborted => "aborted",
            Self::WaitingForConfig => "waiting-for-config",
        }
    }
}

/// What became of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventResult {
    Posted,
    /// Identical to one posted for the pod within the window.
    Suppressed,
    /// The queue was full.
    Dropped,
    Error,
}

impl EventResult {
    const ALL: [EventResult; 4] = [Self::Posted, Self::Suppressed, Self::Dropped, Self::Error];

    fn label(self) -> &'static str {
        match self {
            Self::Posted => "posted",
            Self::Suppressed => "suppressed",
            Self::Dropped => "dropped",
            Self::Error => "error",
        }
    }
}

#[derive(Clone)]
pub struct ReresolveMetrics {
    pub pods_checked: IntCounter,
    pub pods_patched: IntCounter,
    pub pods_dry_run: IntCounter,
    /// Pods the pod watch planned again because their allocated memory changed.
    pub pods_resized: IntCounter,
    failed: IntCounterVec,
    passes: IntCounterVec,
    pub pass_duration: Histogram,
    pub is_leader: IntGauge,
    pub leader_transitions: IntCounter,
    events: IntCounterVec,
}

impl ReresolveMetrics {
    pub fn new(registry: &Registry) -> Result<Self, MetricError> {
        let patched = register(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "koord_webhook_reresolve_pods_patched_total",
                    "Pods whose resolved-qos the re-resolver changed (mode=write), or would have (mode=dry-run).",
                ),
                &["mode"],
            ),
        )?;
        let failed = register(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "koord_webhook_reresolve_pods_failed_total",
                    "Pods the re-resolver could not bring up to date, by reason.",
                ),
                &["reason"],
            ),
        )?;
        let passes = register(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "koord_webhook_reresolve_passes_total",
                    "Re-resolution passes by trigger (a pass serving several counts for each) and outcome.",
                ),
                &["trigger", "outcome"],
            ),
        )?;
        let events = register(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "koord_webhook_reresolve_events_total",
                    "MemoryQOSReresolved Events by result.",
                ),
                &["result"],
            ),
        )?;
        for r in FailReason::ALL {
            failed.with_label_values(&[r.label()]);
        }
        for t in Trigger::ALL {
            for o in PassOutcome::ALL {
                passes.with_label_values(&[t.as_str(), o.label()]);
            }
        }
        for r in EventResult::ALL {
            events.with_label_values(&[r.label()]);
        }
        Ok(ReresolveMetrics {
            pods_checked: register(
                registry,
                IntCounter::new(
                    "koord_webhook_reresolve_pods_checked_total",
                    "Pods the re-resolver resolved and compared with what they carry.",
                ),
            )?,
            pods_resized: register(
                registry,
                IntCounter::new(
                    "koord_webhook_reresolve_pods_resized_total",
                    "Pods whose allocated memory changed (in-place resize) and whose resolved-qos the re-resolver recomputed for it.",
                ),
            )?,
            pods_patched: patched.with_label_values(&["write"]),
            pods_dry_run: patched.with_label_values(&["dry-run"]),
            failed,
            passes,
            pass_duration: register(
                registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "koord_webhook_reresolve_pass_duration_seconds",
                        "Duration of one re-resolution pass (listing, resolving, patching).",
                    )
                    .buckets(vec![
                        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                        600.0,
                    ]),
                ),
            )?,
            is_leader: register(
                registry,
                IntGauge::new(
                    "koord_webhook_reresolve_is_leader",
                    "1 while this replica holds the re-resolver Lease and may write.",
                ),
            )?,
            leader_transitions: register(
                registry,
                IntCounter::new(
                    "koord_webhook_reresolve_leader_transitions_total",
                    "Times this replica gained or lost the re-resolver Lease.",
                ),
            )?,
            events,
        })
    }

    pub fn failed(&self, reason: FailReason) {
        self.failed.with_label_values(&[reason.label()]).inc();
    }

    pub fn pass(&self, triggers: &[Trigger], outcome: PassOutcome) {
        for t in triggers {
            self.passes
                .with_label_values(&[t.as_str(), outcome.label()])
                .inc();
        }
    }

    pub fn event(&self, result: EventResult) {
        self.events.with_label_values(&[result.label()]).inc();
    }
}
