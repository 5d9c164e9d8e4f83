//! Aggregation of readings over `metricAggregateDurationSeconds`.
//!
//! A [`Series`] keeps timestamped readings of one cgroup (or the node). CPU comes from the
//! cumulative counter: the average rate over the window is `(last - first) / elapsed`; memory is
//! the average of the readings. A counter that goes backwards (the cgroup was recreated) starts
//! the series again. Timestamps are [`Instant`]s so tests can use any clock origin.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::usage::Reading;

#[derive(Debug, Clone, Default)]
pub struct Series {
    samples: VecDeque<(Instant, Reading)>,
}

/// Milli-cores from a CPU-time delta (ns) over `elapsed`.
pub fn rate_milli(delta_ns: u64, elapsed: Duration) -> Option<i64> {
    let el = elapsed.as_nanos();
    if el == 0 {
        return None;
    }
    i64::try_from(u128::from(delta_ns) * 1000 / el).ok()
}

impl Series {
    /// Adds a reading and drops the ones older than `window` before it (one older reading is
    /// kept as the start of the CPU delta). A reading not newer than the last is ignored.
    pub fn push(&mut self, at: Instant, r: Reading, window: Duration) {
        if let Some((t, last)) = self.samples.back() {
            if at <= *t {
                return;
            }
            if r.cpu_ns < last.cpu_ns {
                self.samples.clear();
            }
        }
        self.samples.push_back((at, r));
        if let Some(cutoff) = at.checked_sub(window) {
            while self.samples.get(1).is_some_and(|(t1, _)| *t1 <= cutoff) {
                self.samples.pop_front();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    pub fn last_at(&self) -> Option<Instant> {
        self.samples.back().map(|(t, _)| *t)
    }

    /// Average CPU over the whole window, in milli-cores (needs two readings).
    pub fn cpu_avg_milli(&self) -> Option<i64> {
        let ((t0, a), (t1, b)) = (self.samples.front()?, self.samples.back()?);
        rate_milli(
            b.cpu_ns.checked_sub(a.cpu_ns)?,
            t1.checked_duration_since(*t0)?,
        )
    }

    /// CPU over the last interval only (suppression reacts to that), in milli-cores.
    pub fn cpu_recent_milli(&self) -> Option<i64> {
        let n = self.samples.len();
        if n < 2 {
            return None;
        }
        let ((t0, a), (t1, b)) = (self.samples.get(n - 2)?, self.samples.get(n - 1)?);
        rate_milli(
            b.cpu_ns.checked_sub(a.cpu_ns)?,
            t1.checked_duration_since(*t0)?,
        )
    }

    /// Average memory of the readings in the window, in bytes.
    pub fn memory_avg(&self) -> Option<i64> {
        if self.samples.is_empty() {
            return None;
        }
        let sum: u128 = self
            .samples
            .iter()
            .map(|(_, r)| u128::from(r.memory_bytes))
            .sum();
        i64::try_from(sum / self.samples.len() as u128).ok()
    }
}

/// The node's series and one per pod (keyed by UID).
#[derive(Debug, Default)]
pub struct Window<K: Eq + Hash> {
    pub node: Series,
    pub pods: HashMap<K, Series>,
}

impl<K: Eq + Hash + Clone> Window<K> {
    pub fn new() -> Self {
        Self {
            node: Series::default(),
            pods: HashMap::new(),
        }
    }

    /// Drops the series of pods not in `live` (deleted pods).
    pub fn retain(&mut self, live: &std::collections::HashSet<K>) {
        self.pods.retain(|k, _| live.contains(k));
    }

    pub fn pod(&mut self, k: &K) -> &mut Series {
        self.pods.entry(k.clone()).or_default()
    }
}
