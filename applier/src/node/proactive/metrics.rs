//! Proactive reclaim's metric families, registered in the applier's registry.
//!
//! Per container (`namespace`, `pod`, `container`): the loop runs per container, so its stall,
//! target and what it took are per container. The label sets exist only for containers the
//! loop runs for on this node and are removed when the container leaves the loop (its pod
//! deleted, or no longer opted in), so the series count is bounded by the node's containers.
//!
//! The per-container series are one table of plain numbers ([`ContainerSeries`]), turned into
//! metric families only when scraped: a `prometheus` vector keeps, for each label set, its own
//! copy of the family's description and label pairs (about a kilobyte each), and a container
//! has six series (1,320 at 220 containers).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use koord_runtime::metrics::{MetricError, register};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct ProactiveMetrics {
    /// Per container: bytes reclaimed, the last interval's stall, the target, back-offs.
    pub containers_series: ContainerSeries,
    /// The node's total of the containers' bytes.
    pub node_bytes: IntCounter,
    /// Pods that ask for the loop and do not get it, by `reason`.
    pub refused: IntCounterVec,
    /// Reclaims due but not written because the tick had spent its write budget.
    pub over_budget: IntCounter,
    /// Containers the loop runs for now.
    pub containers: IntGauge,
}

/// Why a container's loop backed off: `stall` (the stall reached the target), `refault` (the
/// container faulted back half of the last step), `short` (the kernel found less to reclaim
/// than asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackOff {
    Stall,
    Refault,
    Short,
}

const WHY: [(BackOff, &str); 3] = [
    (BackOff::Stall, "stall"),
    (BackOff::Refault, "refault"),
    (BackOff::Short, "short"),
];

/// One container's series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ContainerRow {
    pub bytes: u64,
    /// Seconds; `None` until its first whole interval.
    pub stall: Option<f64>,
    pub target: f64,
    /// By [`BackOff`], in [`WHY`]'s order.
    pub backoffs: [u64; 3],
}

impl ContainerRow {
    pub fn backoffs(&self, why: BackOff) -> u64 {
        self.backoffs[why as usize]
    }
}

type Key = (String, String, String);

/// The per-container families: `koord_applier_proactive_reclaim_bytes_total`,
/// `_stall_seconds`, `_stall_target_seconds` and `_backoffs_total`.
#[derive(Clone)]
pub struct ContainerSeries {
    descs: Arc<[Desc; 4]>,
    rows: Arc<Mutex<BTreeMap<Key, ContainerRow>>>,
}

const FAMILIES: [(&str, &str, MetricType); 4] = [
    (
        "koord_applier_proactive_reclaim_bytes_total",
        "Bytes the kernel reclaimed from the container for the proactive reclaim loop's memory.reclaim writes.",
        MetricType::COUNTER,
    ),
    (
        "koord_applier_proactive_reclaim_stall_seconds",
        "The container's memory stall (memory.pressure some) over the loop's last interval, seconds.",
        MetricType::GAUGE,
    ),
    (
        "koord_applier_proactive_reclaim_stall_target_seconds",
        "The stall per interval the loop reclaims under (stallTargetMicros), seconds.",
        MetricType::GAUGE,
    ),
    (
        "koord_applier_proactive_reclaim_backoffs_total",
        "Back-offs of the container's loop, by why: stall (the stall reached the target), refault (the container faulted back half of the last step), short (the kernel found less to reclaim than asked).",
        MetricType::COUNTER,
    ),
];

impl ContainerSeries {
    fn new() -> Result<Self, prometheus::Error> {
        let labels = || {
            vec![
                "namespace".to_owned(),
                "pod".to_owned(),
                "container".to_owned(),
            ]
        };
        let desc = |i: usize| {
            let (name, help, _) = FAMILIES[i];
            let mut l = labels();
            if i == 3 {
                l.push("why".to_owned());
            }
            Desc::new(name.to_owned(), help.to_owned(), l, Default::default())
        };
        Ok(Self {
            descs: Arc::new([desc(0)?, desc(1)?, desc(2)?, desc(3)?]),
            rows: Arc::default(),
        })
    }

    fn with(&self, ns: &str, pod: &str, container: &str, f: impl FnOnce(&mut ContainerRow)) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (ns.to_owned(), pod.to_owned(), container.to_owned());
        f(rows.entry(key).or_default());
    }

    /// The container's row, if it is in the loop.
    pub fn get(&self, ns: &str, pod: &str, container: &str) -> Option<ContainerRow> {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        rows.get(&(ns.to_owned(), pod.to_owned(), container.to_owned()))
            .copied()
    }
}

impl Collector for ContainerSeries {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut families: Vec<MetricFamily> = FAMILIES
            .iter()
            .map(|(name, help, kind)| {
                let mut f = MetricFamily::default();
                f.set_name((*name).to_owned());
                f.set_help((*help).to_owned());
                f.set_field_type(*kind);
                f
            })
            .collect();
        for ((ns, pod, container), row) in rows.iter() {
            let labels = |why: Option<&str>| {
                let mut l: Vec<LabelPair> =
                    [("container", container), ("namespace", ns), ("pod", pod)]
                        .into_iter()
                        .map(|(k, v)| {
                            let mut p = LabelPair::default();
                            p.set_name(k.to_owned());
                            p.set_value(v.clone());
                            p
                        })
                        .collect();
                if let Some(why) = why {
                    let mut p = LabelPair::default();
                    p.set_name("why".to_owned());
                    p.set_value(why.to_owned());
                    l.push(p);
                }
                l
            };
            families[0]
                .mut_metric()
                .push(counter(labels(None), row.bytes));
            if let Some(stall) = row.stall {
                families[1].mut_metric().push(gauge(labels(None), stall));
            }
            families[2]
                .mut_metric()
                .push(gauge(labels(None), row.target));
            for (i, (_, why)) in WHY.iter().enumerate() {
                families[3]
                    .mut_metric()
                    .push(counter(labels(Some(why)), row.backoffs[i]));
            }
        }
        families.retain(|f| !f.get_metric().is_empty());
        families
    }
}

fn counter(labels: Vec<LabelPair>, v: u64) -> Metric {
    let mut c = Counter::default();
    #[allow(clippy::cast_precision_loss)] // a counter's exposition is a float
    c.set_value(v as f64);
    let mut m = Metric::default();
    m.set_label(labels);
    m.set_counter(c);
    m
}

fn gauge(labels: Vec<LabelPair>, v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::default();
    m.set_label(labels);
    m.set_gauge(g);
    m
}

impl ProactiveMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        Ok(Self {
            containers_series: register(registry, ContainerSeries::new())?,
            node_bytes: register(
                registry,
                IntCounter::new(
                    "koord_applier_proactive_reclaim_node_bytes_total",
                    "Bytes the proactive reclaim loop reclaimed on this node, all containers.",
                ),
            )?,
            refused: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_proactive_reclaim_refused_pods_total",
                        "Pods whose annotation enables proactive reclaim and that the loop does not run for, by reason (counted once per version of the pod).",
                    ),
                    &["reason"],
                ),
            )?,
            over_budget: register(
                registry,
                IntCounter::new(
                    "koord_applier_proactive_reclaim_over_budget_total",
                    "Reclaims due but not written because the tick had spent its write budget (--proactive-reclaim-write-budget-ms).",
                ),
            )?,
            containers: register(
                registry,
                IntGauge::new(
                    "koord_applier_proactive_reclaim_containers",
                    "Containers the proactive reclaim loop runs for on this node.",
                ),
            )?,
        })
    }

    /// A container joins the loop: its target, and its counters at 0 (so `rate()` and the
    /// dashboard have them from the start, not from the first reclaim or back-off).
    pub fn join(&self, namespace: &str, pod: &str, container: &str, target_seconds: f64) {
        self.containers_series
            .with(namespace, pod, container, |r| r.target = target_seconds);
    }

    /// The stall of the container's last interval, seconds.
    pub fn stall(&self, namespace: &str, pod: &str, container: &str, seconds: f64) {
        self.containers_series
            .with(namespace, pod, container, |r| r.stall = Some(seconds));
    }

    /// A back-off of the container's loop.
    pub fn backoff(&self, namespace: &str, pod: &str, container: &str, why: BackOff) {
        self.containers_series
            .with(namespace, pod, container, |r| r.backoffs[why as usize] += 1);
    }

    /// Bytes reclaimed from the container (and so from the node).
    pub fn reclaimed(&self, namespace: &str, pod: &str, container: &str, bytes: u64) {
        self.containers_series
            .with(namespace, pod, container, |r| r.bytes += bytes);
        self.node_bytes.inc_by(bytes);
    }

    /// Drops a container's series.
    pub fn forget(&self, namespace: &str, pod: &str, container: &str) {
        let mut rows = self
            .containers_series
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        rows.remove(&(namespace.to_owned(), pod.to_owned(), container.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_scraped_as_the_families_it_replaces() {
        let registry = Registry::new();
        let m = ProactiveMetrics::register(&registry).expect("register");
        m.join("shop", "redis-0", "redis", 0.01);
        m.reclaimed("shop", "redis-0", "redis", 4096);
        m.backoff("shop", "redis-0", "redis", BackOff::Refault);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("text");
        let l = r#"container="redis",namespace="shop",pod="redis-0""#;
        for want in [
            "# TYPE koord_applier_proactive_reclaim_bytes_total counter".to_owned(),
            format!("koord_applier_proactive_reclaim_bytes_total{{{l}}} 4096"),
            format!("koord_applier_proactive_reclaim_stall_target_seconds{{{l}}} 0.01"),
            format!(r#"koord_applier_proactive_reclaim_backoffs_total{{{l},why="stall"}} 0"#),
            format!(r#"koord_applier_proactive_reclaim_backoffs_total{{{l},why="refault"}} 1"#),
            format!(r#"koord_applier_proactive_reclaim_backoffs_total{{{l},why="short"}} 0"#),
            "koord_applier_proactive_reclaim_node_bytes_total 4096".to_owned(),
        ] {
            assert!(text.contains(&want), "{want} not in\n{text}");
        }
        // No stall series before the first whole interval; one after.
        assert!(!text.contains("koord_applier_proactive_reclaim_stall_seconds{"));
        m.stall("shop", "redis-0", "redis", 0.002);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("text");
        assert!(text.contains(&format!(
            "koord_applier_proactive_reclaim_stall_seconds{{{l}}} 0.002"
        )));
        // Forgotten: no series left, the families' headers gone with them.
        m.forget("shop", "redis-0", "redis");
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("text");
        assert!(!text.contains("redis-0"), "{text}");
    }
}
