//! Prometheus metrics of the webhook (`/metrics`).
//!
//! Registered with [`koord_runtime::metrics::register`], like the applier's. The admission
//! counters are resolved to their label set once at start: a request then costs one atomic
//! add, not a hash lookup under a lock. The re-resolver's families are [`reresolve`].

pub mod reresolve;

use koord_api::QosClass;
use koord_runtime::metrics::{MetricError, register};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use self::reresolve::ReresolveMetrics;
use crate::admission::{Decision, OperationLabel};

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
    tls_expiry: IntGauge,
    tls_ca_bundle_match: IntGaugeVec,
    pub inflight: IntGauge,
    pub reresolve: ReresolveMetrics,
    pub connections_open: IntGauge,
    pub connections_shed: IntCounter,
    pub connections_evicted: IntCounter,
    pub connections_idle_closed: IntCounter,
    pub connections_h2_withheld: IntCounter,
}

impl Metrics {
    pub fn new() -> Result<Self, MetricError> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| register(&registry, IntCounter::new(name, help));
        let by_config = |name: &str, help: &str| {
            register(
                &registry,
                IntCounterVec::new(Opts::new(name, help), &["config"]),
            )
        };
        let admission_duration = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "koord_webhook_admission_duration_seconds",
                    "Time from request to response body, per admission review.",
                )
                .buckets(vec![
                    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                    0.1, 0.25, 0.5, 1.0, 2.5,
                ]),
            ),
        )?;
        let admissions = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "koord_webhook_admissions_total",
                    "Admission reviews by operation, QoS class and outcome.",
                ),
                &["operation", "qos_class", "outcome"],
            ),
        )?;
        let config_reloads = by_config(
            "koord_webhook_config_reloads_total",
            "ConfigMap versions applied, by config source.",
        )?;
        let config_errors = by_config(
            "koord_webhook_config_errors_total",
            "ConfigMap versions rejected (the last good config stays), by config source.",
        )?;
        let config_valid = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "koord_webhook_config_valid",
                    "1 when the latest ConfigMap version parsed, 0 while the last good one is in use.",
                ),
                &["config"],
            ),
        )?;
        let tls_reloads = counter(
            "koord_webhook_tls_reloads_total",
            "Serving certificate reloads.",
        )?;
        let tls_reload_errors = counter(
            "koord_webhook_tls_reload_errors_total",
            "Serving certificate changes that could not be loaded (the old one stays).",
        )?;
        let tls_expiry = register(
            &registry,
            IntGauge::new(
                "koord_webhook_tls_certificate_expiry_timestamp_seconds",
                "Unix time at which the served serving certificate expires (its notAfter).",
            ),
        )?;
        let tls_ca_bundle_match = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "koord_webhook_tls_ca_bundle_match",
                    "1 while the served certificate verifies against every caBundle of the MutatingWebhookConfiguration, 0 while it does not (self-managed certificates).",
                ),
                &["webhook_configuration"],
            ),
        )?;
        let inflight = register(
            &registry,
            IntGauge::new(
                "koord_webhook_inflight_admissions",
                "Admission reviews being processed.",
            ),
        )?;
        let connections_open = register(
            &registry,
            IntGauge::new(
                "koord_webhook_connections_open",
                "TLS connections open (admission listener).",
            ),
        )?;
        let connections_shed = counter(
            "koord_webhook_connections_shed_total",
            "Connections closed on arrival because --max-connections were open.",
        )?;
        let connections_evicted = counter(
            "koord_webhook_connections_evicted_total",
            "Connections closed to admit a new one at --max-connections or --max-connections-per-source: one not answered yet (silent or half-sent) of the source holding the most, or the newcomer's own source's least valuable (unfinished first, then the kept-alive one idle the longest, then one whose request stalled for a second); never one making progress on a request.",
        )?;
        let connections_idle_closed = counter(
            "koord_webhook_connections_idle_closed_total",
            "Connections closed after --idle-timeout without a byte either way.",
        )?;
        let connections_h2_withheld = counter(
            "koord_webhook_connections_h2_withheld_total",
            "Connections offered HTTP/1.1 only because --max-h2-connections HTTP/2 connections were open.",
        )?;
        koord_runtime::logging::count_suppressed_lines(counter(
            "koord_webhook_log_lines_suppressed_total",
            &format!(
                "Log lines not written because their kind (one per connection or request, which a client can provoke: rustls's warnings about a handshake, denied or failed admissions) had written {} in the minute.",
                koord_runtime::logging::LINES_PER_WINDOW
            ),
        )?);
        for source in [ConfigSource::Cluster, ConfigSource::Namespace] {
            config_reloads.with_label_values(&[source.label()]);
            config_errors.with_label_values(&[source.label()]);
            config_valid.with_label_values(&[source.label()]).set(1);
        }
        let reresolve = ReresolveMetrics::new(&registry)?;
        Ok(Metrics {
            reresolve,
            registry,
            admission_duration,
            admissions: admission_counters(&admissions),
            config_reloads,
            config_errors,
            config_valid,
            tls_reloads,
            tls_reload_errors,
            tls_expiry,
            tls_ca_bundle_match,
            inflight,
            connections_open,
            connections_shed,
            connections_evicted,
            connections_idle_closed,
            connections_h2_withheld,
        })
    }

    pub fn count_admission(
        &self,
        op: OperationLabel,
        class: Option<QosClass>,
        decision: &Decision,
    ) {
        // Indexes by match, not by comparing label strings: this runs once per admission.
        let op = match op {
            OperationLabel::Create => 0,
            OperationLabel::Update => 1,
            OperationLabel::Other => 2,
        };
        let class = match class {
            Some(QosClass::Lse) => 0,
            Some(QosClass::Lsr) => 1,
            Some(QosClass::Ls) => 2,
            Some(QosClass::Be) => 3,
            Some(QosClass::System) => 4,
            None => 5,
        };
        let outcome = match decision {
            Decision::Mutated { .. } => 0,
            Decision::Unchanged { .. } => 1,
            Decision::Denied { .. } => 2,
            Decision::Error { .. } => 3,
        };
        if let Some(c) = self
            .admissions
            .get((op * CLASSES.len() + class) * OUTCOMES.len() + outcome)
        {
            c.inc();
        }
    }

    /// A ConfigMap version was applied (`ok`) or rejected.
    pub fn config_parsed(&self, source: ConfigSource, ok: bool) {
        let counter = if ok {
            &self.config_reloads
        } else {
            &self.config_errors
        };
        counter.with_label_values(&[source.label()]).inc();
        self.config_valid
            .with_label_values(&[source.label()])
            .set(i64::from(ok));
    }

    /// The certificate now served: its leaf's notAfter (`certs::inspect::leaf_not_after`) in
    /// `koord_webhook_tls_certificate_expiry_timestamp_seconds`. `None`, a PEM that does not
    /// parse, leaves the gauge as it was (the config built from it would have failed first).
    pub fn served_certificate(&self, not_after: Option<std::time::SystemTime>) {
        let Some(not_after) = not_after else {
            return;
        };
        let secs = not_after
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.tls_expiry.set(secs);
    }

    /// Whether the served certificate verifies against the caBundle of `configuration`.
    pub fn ca_bundle_match(&self, configuration: &str, matches: bool) {
        self.tls_ca_bundle_match
            .with_label_values(&[configuration])
            .set(i64::from(matches));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        koord_runtime::metrics::render(&self.registry)
    }
}

/// One counter handle per (operation, class, outcome), in [`Metrics::count_admission`]'s index
/// order, so counting an admission is one atomic add.
fn admission_counters(vec: &IntCounterVec) -> Vec<IntCounter> {
    debug_assert_eq!(
        OperationLabel::ALL.map(OperationLabel::as_str),
        ["CREATE", "UPDATE", "other"]
    );
    debug_assert_eq!(OUTCOMES, ["mutated", "unchanged", "denied", "error"]);
    debug_assert_eq!(CLASSES[..5], QosClass::ALL.map(QosClass::as_str));
    let mut out = Vec::with_capacity(OperationLabel::ALL.len() * CLASSES.len() * OUTCOMES.len());
    for op in OperationLabel::ALL {
        for class in CLASSES {
            for outcome in OUTCOMES {
                out.push(vec.with_label_values(&[op.as_str(), class, outcome]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::certs::inspect::leaf_not_after;

    fn value(text: &str, series: &str) -> Option<i64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn certificate_expiry_and_ca_bundle_match() {
        let m = Metrics::new().expect("metrics");
        let expiry = "koord_webhook_tls_certificate_expiry_timestamp_seconds ";
        assert_eq!(
            value(&m.render(), expiry),
            Some(0),
            "0 until a certificate is served"
        );
        // No series before the first check: certificates from files never check the bundle.
        assert!(!m.render().contains("koord_webhook_tls_ca_bundle_match{"));
        let pem = crate::certs::self_signed(vec!["koord-webhook.svc".into()], 30).expect("cert");
        m.served_certificate(leaf_not_after(pem.cert_pem.as_bytes()));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let got = value(&m.render(), expiry).expect("expiry series");
        let in_30_days = i64::try_from(now + 30 * 86_400).expect("fits");
        assert!(
            (got - in_30_days).abs() < 2 * 86_400,
            "notAfter {got}, expected about {in_30_days}"
        );
        m.served_certificate(leaf_not_after(b"not a certificate"));
        assert_eq!(value(&m.render(), expiry), Some(got), "kept on a bad PEM");
        m.ca_bundle_match("koord-webhook", false);
        let series = "koord_webhook_tls_ca_bundle_match{webhook_configuration=\"koord-webhook\"} ";
        assert_eq!(value(&m.render(), series), Some(0));
        m.ca_bundle_match("koord-webhook", true);
        assert_eq!(value(&m.render(), series), Some(1));
    }
}
