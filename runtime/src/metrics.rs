//! Metric registration, one style for the whole product: build the collector, register it on
//! the given registry, return the handle; a failure says which metric and why.

use prometheus::Registry;
use prometheus::core::Collector;

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
