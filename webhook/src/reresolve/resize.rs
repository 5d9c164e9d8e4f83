//! Which watched pods the re-resolver plans between passes (pure): those whose allocated
//! memory changed, i.e. an in-place resize the kubelet has carried out (docs/contract.md §5,
//! Resize). The numbers of the annotation come from `status.containerStatuses[].resources`
//! ([`PodInput::allocated_resources`]), so a pod is worth planning again exactly when the
//! memory there changed since it was last seen; any other pod event (readiness, restarts,
//! a pending or infeasible resize, a CPU-only resize) changes nothing the engine reads from
//! the resources and is not planned.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use koord_api::keys::RESOURCE_MEMORY;

use crate::resolve::PodInput;
use crate::resolve::pod_input::ResourcesInput;

/// A digest of the memory the kubelet reports per regular container: container names with
/// their `status.containerStatuses[].resources` memory request and limit, in spec order.
pub fn allocated_memory_digest(pod: &PodInput<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    for c in &pod.spec.containers {
        c.name.as_str().hash(&mut h);
        let memory = |r: Option<&ResourcesInput<'_>>, limits: bool| {
            let list = if limits {
                r?.limits.as_ref()
            } else {
                r?.requests.as_ref()
            };
            list?.get(RESOURCE_MEMORY).map(|q| q.as_str().to_owned())
        };
        let allocated = pod.allocated_resources(c.name.as_str());
        memory(allocated, false).hash(&mut h);
        memory(allocated, true).hash(&mut h);
    }
    h.finish()
}

/// What a pod event is to the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// First seen since the watch started: the full pass that follows an election covers it.
    First,
    /// The allocated memory is what it was.
    Same,
    /// The allocated memory changed: plan the pod.
    Changed,
}

/// Per pod, the digest last seen. Keyed by a digest of the UID, not the UID: the holder keeps
/// one entry per pod of the cluster (16 bytes, not ~90 with the UID's `String`); two pods with
/// the same UID digest (odds about n²/2⁶⁴) would share an entry and could miss one resize until
/// the next pass.
#[derive(Debug, Default)]
pub struct ResizeTracker {
    seen: HashMap<u64, u64>,
}

fn uid_key(uid: &str) -> u64 {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
}

impl ResizeTracker {
    pub fn observe(&mut self, uid: &str, digest: u64) -> Seen {
        let key = uid_key(uid);
        match self.seen.get_mut(&key) {
            Some(d) if *d == digest => Seen::Same,
            Some(d) => {
                *d = digest;
                Seen::Changed
            }
            None => {
                self.seen.insert(key, digest);
                Seen::First
            }
        }
    }

    /// The pod was deleted.
    pub fn forget(&mut self, uid: &str) {
        self.seen.remove(&uid_key(uid));
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(spec_mi: u32, status: Option<Value>, ready: bool) -> String {
        let mut cs = json!({"name": "app", "ready": ready, "restartCount": 0});
        if let Some(s) = status {
            cs["resources"] = s;
        }
        json!({"metadata": {"name": "p", "uid": "u"},
               "spec": {"containers": [{"name": "app", "resources": {"requests": {"memory": format!("{spec_mi}Mi")}}}]},
               "status": {"containerStatuses": [cs],
                          "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
        .to_string()
    }

    fn digest(text: &str) -> u64 {
        let p: PodInput<'_> = serde_json::from_str(text).expect("pod");
        allocated_memory_digest(&p)
    }

    fn res(cpu: &str, mi: u32) -> Value {
        json!({"requests": {"cpu": cpu, "memory": format!("{mi}Mi")}, "limits": {"memory": format!("{}Mi", 2 * mi)}})
    }

    #[test]
    fn which_events_are_planned() {
        let base = pod(512, Some(res("500m", 512)), true);
        // (case, the next event of the same pod, seen as)
        let cases = [
            (
                "readiness flips",
                pod(512, Some(res("500m", 512)), false),
                Seen::Same,
            ),
            (
                "resize pending: only the spec moved",
                pod(1024, Some(res("500m", 512)), true),
                Seen::Same,
            ),
            (
                "cpu only resized",
                pod(512, Some(res("2", 512)), true),
                Seen::Same,
            ),
            (
                "memory up, allocated",
                pod(1024, Some(res("500m", 1024)), true),
                Seen::Changed,
            ),
            (
                "memory down, allocated",
                pod(256, Some(res("500m", 256)), true),
                Seen::Changed,
            ),
            (
                "the status lost its resources",
                pod(512, None, true),
                Seen::Changed,
            ),
        ];
        for (case, next, want) in cases {
            let mut t = ResizeTracker::default();
            assert_eq!(t.observe("u", digest(&base)), Seen::First, "{case}");
            assert_eq!(t.observe("u", digest(&base)), Seen::Same, "{case}");
            assert_eq!(t.observe("u", digest(&next)), want, "{case}");
            assert_eq!(t.observe("u", digest(&next)), Seen::Same, "{case}: once");
        }
        let mut t = ResizeTracker::default();
        t.observe("u", 1);
        t.forget("u");
        assert!(t.is_empty());
        assert_eq!(t.observe("u", 2), Seen::First);
    }
}
