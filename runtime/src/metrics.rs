//! Metric registration, one style for the whole product: build the collector, register it on
//! the given registry, return the handle; a failure says which metric and why. And the text
//! exposition of a registry, written once.

use prometheus::core::Collector;
use prometheus::{Encoder as _, Registry, TextEncoder};

/// A metric could not be created (bad name or labels) or registered (the same name twice).
#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    #[error("building a metric: {0}")]
    Build(#[source] prometheus::Error),
    #[error("registering metric {name}: {source}")]
    Register {
        name: String,
        #[source]
        source: prometheus::Error,
    },
}

/// Registers `metric` (a `Counter`, `GaugeVec`, `Histogram`, ...) on `registry` and returns the
/// handle. Takes the constructor's `Result` so call sites stay one expression.
///
/// ```
/// let registry = prometheus::Registry::new();
/// let c = koord_runtime::metrics::register(
///     &registry,
///     prometheus::IntCounter::new("x_total", "x"),
/// ).unwrap();
/// c.inc();
/// ```
pub fn register<M>(
    registry: &Registry,
    metric: Result<M, prometheus::Error>,
) -> Result<M, MetricError>
where
    M: Collector + Clone + 'static,
{
    let metric = metric.map_err(MetricError::Build)?;
    registry
        .register(Box::new(metric.clone()))
        .map_err(|source| MetricError::Register {
            name: metric
                .desc()
                .first()
                .map(|d| d.fq_name.clone())
                .unwrap_or_default(),
            source,
        })?;
    Ok(metric)
}

/// The Prometheus text exposition of every family in `registry`.
pub fn render(registry: &Registry) -> String {
    let mut buf = Vec::new();
    // Encoding gathered families into a Vec cannot fail.
    let _ = TextEncoder::new().encode(&registry.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_renders_and_names_a_duplicate() {
        let registry = Registry::new();
        let c = register(&registry, prometheus::IntCounter::new("x_total", "x")).expect("first");
        c.inc_by(3);
        assert!(render(&registry).contains("x_total 3"));
        let err = register(&registry, prometheus::IntCounter::new("x_total", "x"))
            .expect_err("duplicate");
        assert!(
            err.to_string().starts_with("registering metric x_total:"),
            "{err}"
        );
        assert!(matches!(
            register(&registry, prometheus::IntCounter::new("bad name", "x")),
            Err(MetricError::Build(_))
        ));
    }
}
