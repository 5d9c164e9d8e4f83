//! When a pod's locality pass is due: once when a container starts (a new container ID) or
//! the locality decision changes, then every `migrateIntervalMinutes` when set; policy `none`
//! (or no decision) stops it. Pure: the caller passes the clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use koord_api::{LocalityPolicy, ResolvedMemoryLocality};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// First sight of the pod, or a container (re)started.
    Start,
    /// The memoryLocality decision changed.
    Changed,
    /// `migrateIntervalMinutes` elapsed since the last pass.
    Interval,
}

#[derive(Debug, Clone)]
struct Entry {
    decision: ResolvedMemoryLocality,
    containers: Vec<String>,
    last_run: Instant,
    last_seen: Instant,
}

/// Per-pod state, keyed by pod UID.
#[derive(Debug, Default)]
pub struct Scheduler {
    pods: HashMap<String, Entry>,
}

impl Scheduler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the pod needs a pass now; a `Some` is recorded as run at `now`.
    /// `container_ids` are the IDs of its started containers.
    pub fn due(
        &mut self,
        uid: &str,
        decision: Option<&ResolvedMemoryLocality>,
        mut container_ids: Vec<String>,
        now: Instant,
    ) -> Option<Trigger> {
        let Some(decision) = decision.filter(|d| d.policy == LocalityPolicy::BestEffort) else {
            self.pods.remove(uid);
            return None;
        };
        container_ids.sort_unstable();
        container_ids.dedup();
        if container_ids.is_empty() {
            return None;
        }
        let trigger = match self.pods.get_mut(uid) {
            None => Some(Trigger::Start),
            Some(e) => {
                e.last_seen = now;
                if &e.decision != decision {
                    Some(Trigger::Changed)
                } else if e.containers != container_ids {
                    Some(Trigger::Start)
                } else {
                    let every = decision
                        .migrate_interval_minutes
                        .filter(|m| *m > 0)
                        .map(|m| Duration::from_secs(u64::from(m) * 60));
                    every
                        .filter(|every| now.saturating_duration_since(e.last_run) >= *every)
                        .map(|_| Trigger::Interval)
                }
            }
        };
        if trigger.is_some() {
            self.pods.insert(
                uid.to_owned(),
                Entry {
                    decision: decision.clone(),
                    containers: container_ids,
                    last_run: now,
                    last_seen: now,
                },
            );
        }
        trigger
    }

    /// Drops pods not seen for `max_age` (deleted pods; the watch resync shows live ones) and
    /// returns their UIDs.
    pub fn expire(&mut self, now: Instant, max_age: Duration) -> Vec<String> {
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.last_seen) > max_age)
            .map(|(k, _)| k.clone())
            .collect();
        for uid in &gone {
            self.pods.remove(uid);
        }
        gone
    }

    pub fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_api::DecisionSource;

    fn decision(policy: LocalityPolicy, minutes: Option<u32>) -> ResolvedMemoryLocality {
        ResolvedMemoryLocality {
            policy,
            migrate_interval_minutes: minutes,
            source: DecisionSource::PodAnnotation,
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn schedule_sequence() {
        let t0 = Instant::now();
        let min = Duration::from_secs(60);
        let mut s = Scheduler::new();
        let be10 = decision(LocalityPolicy::BestEffort, Some(10));
        let be = decision(LocalityPolicy::BestEffort, None);
        let none = decision(LocalityPolicy::None, None);
        // Not started yet: nothing, and nothing remembered.
        assert_eq!(s.due("p", Some(&be10), vec![], t0), None);
        assert!(s.is_empty());
        assert_eq!(
            s.due("p", Some(&be10), ids(&["b", "a"]), t0),
            Some(Trigger::Start)
        );
        assert_eq!(
            s.due("p", Some(&be10), ids(&["a", "b"]), t0 + min),
            None,
            "same state"
        );
        assert_eq!(
            s.due("p", Some(&be10), ids(&["a", "b"]), t0 + 9 * min),
            None
        );
        assert_eq!(
            s.due("p", Some(&be10), ids(&["a", "b"]), t0 + 10 * min),
            Some(Trigger::Interval)
        );
        assert_eq!(
            s.due("p", Some(&be10), ids(&["a", "b"]), t0 + 11 * min),
            None,
            "timer restarted"
        );
        assert_eq!(
            s.due("p", Some(&be10), ids(&["a", "c"]), t0 + 12 * min),
            Some(Trigger::Start),
            "container b restarted as c"
        );
        assert_eq!(
            s.due("p", Some(&be), ids(&["a", "c"]), t0 + 13 * min),
            Some(Trigger::Changed)
        );
        assert_eq!(
            s.due("p", Some(&be), ids(&["a", "c"]), t0 + 600 * min),
            None,
            "no interval: once"
        );
        assert_eq!(
            s.due("p", Some(&none), ids(&["a", "c"]), t0 + 601 * min),
            None,
            "none stops it"
        );
        assert!(s.is_empty());
        assert_eq!(s.due("p", None, ids(&["a"]), t0), None);
        assert_eq!(
            s.due("p", Some(&be), ids(&["a", "c"]), t0 + 602 * min),
            Some(Trigger::Start),
            "bestEffort again after none"
        );
        assert_eq!(
            s.due(
                "q",
                Some(&decision(LocalityPolicy::BestEffort, Some(0))),
                ids(&["x"]),
                t0
            ),
            Some(Trigger::Start)
        );
        assert_eq!(
            s.due(
                "q",
                Some(&decision(LocalityPolicy::BestEffort, Some(0))),
                ids(&["x"]),
                t0 + 600 * min
            ),
            None,
            "interval 0 is not a loop"
        );
    }

    #[test]
    fn expires_unseen_pods() {
        let t0 = Instant::now();
        let mut s = Scheduler::new();
        let be = decision(LocalityPolicy::BestEffort, None);
        s.due("old", Some(&be), ids(&["a"]), t0);
        s.due("live", Some(&be), ids(&["a"]), t0);
        s.due(
            "live",
            Some(&be),
            ids(&["a"]),
            t0 + Duration::from_secs(500),
        );
        assert_eq!(
            s.expire(t0 + Duration::from_secs(700), Duration::from_secs(600)),
            vec!["old".to_owned()]
        );
        assert_eq!(s.len(), 1);
        s.forget("live");
        assert!(s.is_empty());
    }
}
