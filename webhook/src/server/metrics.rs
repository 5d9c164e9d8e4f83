//! Prometheus metrics of the webhook (`/metrics`).
//!
//! The admission counters are resolved to their label set once at start: a request then costs
//! one atomic add, not a hash lookup under a lock.

use koord_api::QosClass;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::admission::{Decision, OperationLabel};

const OUTCOMES: [&str; 4] = ["mutated", "unchanged", "denied", "error"];
const CLASSES: [&str; 6] = ["LSE", "LSR", "LS", "BE", "SYSTEM", "none"];

/// The config sources counted by the reload/error metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// `ack-slo-config`.
    Cluster,
    /// `ack-slo-pod-config`.
    Namespace,
}

impl ConfigSource {
    pub fn label(self) -> &'static str {
        match self {
            ConfigSource::Cluster => "cluster",
            ConfigSource::Namespace => "namespace",
        }
    }
}

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub admission_duration: Histogram,
    admissions: Vec<IntCounter>,
    config_reloads: IntCounterVec,
    config_errors: IntCounterVec,
    config_valid: IntGaugeVec,
    pub tls_reloads: IntCounter,
    pub tls_reload_errors: IntCounter,
    pub inflight: IntGauge,
}

#[derive(Debug, thiserror::Error)]
#[error("metrics registration failed: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

impl Metrics {
    pub fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let admission_duration = Histogram::with_opts(
            HistogramOpts::new(
                "koord_webhook_admission_duration_seconds",
                "Time from request to response body, per admission review.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
        )?;
        let admissions_vec = IntCounterVec::new(
            Opts::new(
                "koord_webhook_admissions_total",
                "Admission reviews by operation, QoS class and outcome.",
            ),
            &["operation", "qos_class", "outcome"],
        )?;
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "koord_webhook_config_reloads_total",
                "ConfigMap versions applied, by config source.",
            ),
            &["config"],
        )?;
        let config_errors = IntCounterVec::new(
            Opts::new(
                "koord_webhook_config_errors_total",
                "ConfigMap versions rejected (the last good config stays), by config source.",
            ),
            &["config"],
        )?;
        let config_valid = IntGaugeVec::new(
            Opts::new(
                "koord_webhook_config_valid",
                "1 when the latest ConfigMap version parsed, 0 while the last good one is in use.",
            ),
            &["config"],
        )?;
        let tls_reloads = IntCounter::new(
            "koord_webhook_tls_reloads_total",
            "Serving certificate reloads.",
        )?;
        let tls_reload_errors = IntCounter::new(
            "koord_webhook_tls_reload_errors_total",
            "Serving certificate changes that could not be loaded (the old one stays).",
        )?;
        let inflight = IntGauge::new(
            "koord_webhook_inflight_admissions",
            "Admission reviews being processed.",
        )?;
        registry.register(Box::new(admission_duration.clone()))?;
        registry.register(Box::new(admissions_vec.clone()))?;
        registry.register(Box::new(config_reloads.clone()))?;
        registry.register(Box::new(config_errors.clone()))?;
        registry.register(Box::new(config_valid.clone()))?;
        registry.register(Box::new(tls_reloads.clone()))?;
        registry.register(Box::new(tls_reload_errors.clone()))?;
        registry.register(Box::new(inflight.clone()))?;

        let mut admissions = Vec::with_capacity(3 * CLASSES.len() * OUTCOMES.len());
        for op in OperationLabel::ALL {
            for class in CLASSES {
                for outcome in OUTCOMES {
                    admissions.push(admissions_vec.with_label_values(&[
                        op.as_str(),
                        class,
                        outcome,
                    ]));
                }
            }
        }
        for source in [ConfigSource::Cluster, ConfigSource::Namespace] {
            config_reloads.with_label_values(&[source.label()]);
            config_errors.with_label_values(&[source.label()]);
            config_valid.with_label_values(&[source.label()]).set(1);
        }
        Ok(Metrics {
            registry,
            admission_duration,
            admissions,
            config_reloads,
            config_errors,
            config_valid,
            tls_reloads,
            tls_reload_errors,
            inflight,
        })
    }

    pub fn count_admission(
        &self,
        op: OperationLabel,
        class: Option<QosClass>,
        decision: &Decision,
    ) {
        let op = OperationLabel::ALL
            .iter()
            .position(|o| *o == op)
            .unwrap_or(2);
        let class = class
            .and_then(|c| CLASSES.iter().position(|n| *n == c.as_str()))
            .unwrap_or(CLASSES.len() - 1);
        let outcome = OUTCOMES
            .iter()
            .position(|o| *o == decision.outcome())
            .unwrap_or(3);
        if let Some(c) = self
            .admissions
            .get((op * CLASSES.len() + class) * OUTCOMES.len() + outcome)
        {
            c.inc();
        }
    }

    pub fn config_reloaded(&self, source: ConfigSource) {
        self.config_reloads
            .with_label_values(&[source.label()])
            .inc();
        self.config_valid
            .with_label_values(&[source.label()])
            .set(1);
    }

    pub fn config_error(&self, source: ConfigSource) {
        self.config_errors
            .with_label_values(&[source.label()])
            .inc();
        self.config_valid
            .with_label_values(&[source.label()])
            .set(0);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding gathered families into a Vec fails only on invalid metric families,
        // which registration already rejected.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
