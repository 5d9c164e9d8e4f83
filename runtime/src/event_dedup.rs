//! Which Events to post: an Event identical to one already posted about the same object
//! (same uid, reason and message) within a window is dropped, so a component that reaches the
//! same conclusion every pass, or fights another writer, cannot flood the API server.
//!
//! kube-runtime's `Recorder` is not used by either binary: it keys its series on the reason
//! without the message, so a changed message would be recorded as a repeat of the old text.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

/// How often [`EventDedup::expire`] scans at most: `admit` checks an entry's age itself, so a
/// late scan only keeps memory a little longer, and a caller may call `expire` per Event.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// Remembers what was posted per object so identical Events are posted once per window.
///
/// An entry is two 64-bit digests and a time, not the texts: the webhook's re-resolver posts
/// one Event per pod it changes, tens of thousands in a large cluster's pass, each message a
/// few hundred bytes, and all of them are remembered for the window. Two different Events with
/// the same digests (odds about n²/2⁶⁴) would cost one Event not posted.
#[derive(Debug)]
pub struct EventDedup {
    window: Duration,
    /// (digest of the object's uid, digest of reason and message) -> when posted.
    seen: HashMap<(u64, u64), Instant>,
    next_scan: Option<Instant>,
}

fn digest(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl EventDedup {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            seen: HashMap::new(),
            next_scan: None,
        }
    }

    /// Whether the Event (`uid`, `reason`, `message`) should be posted now; records it if so.
    pub fn admit(&mut self, uid: &str, reason: &'static str, message: &str, now: Instant) -> bool {
        let key = (digest(uid), digest((reason, message)));
        match self.seen.get(&key) {
            Some(at) if now.duration_since(*at) < self.window => false,
            _ => {
                self.seen.insert(key, now);
                true
            }
        }
    }

    /// Drops everything about a deleted object.
    pub fn forget(&mut self, uid: &str) {
        let uid = digest(uid);
        self.seen.retain(|(u, _), _| *u != uid);
    }

    /// Drops entries older than the window (bounded memory); scans at most once a second.
    pub fn expire(&mut self, now: Instant) {
        if self.next_scan.is_some_and(|at| now < at) {
            return;
        }
        self.next_scan = Some(now + EXPIRE_EVERY);
        let window = self.window;
        self.seen.retain(|_, at| now.duration_since(*at) < window);
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

    #[test]
    fn identical_events_are_posted_once_per_window() {
        let mut d = EventDedup::new(Duration::from_secs(600));
        let t0 = Instant::now();
        assert!(d.admit("a", "R", "x", t0));
        assert!(
            !d.admit("a", "R", "x", t0 + Duration::from_secs(60)),
            "same event within the window"
        );
        assert!(
            d.admit("a", "R", "y", t0 + Duration::from_secs(60)),
            "a changed message is a new event"
        );
        assert!(
            d.admit("a", "Other", "x", t0 + Duration::from_secs(60)),
            "another reason"
        );
        assert!(d.admit("b", "R", "x", t0), "another object");
        assert!(
            d.admit("a", "R", "x", t0 + Duration::from_secs(601)),
            "after the window"
        );
        d.forget("a");
        assert_eq!(d.len(), 1);
        d.expire(t0 + Duration::from_secs(10_000));
        assert!(d.is_empty());
    }

    #[test]
    fn expiry_scans_at_most_once_a_second_and_admit_still_ages_entries() {
        let mut d = EventDedup::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(d.admit("a", "R", "x", t0));
        assert!(d.admit("b", "R", "x", at(500)));
        d.expire(at(10_200));
        assert_eq!(
            d.len(),
            1,
            "the first call scans: a is past the window, b is not"
        );
        d.expire(at(11_000));
        assert_eq!(
            d.len(),
            1,
            "within a second of the last scan: b, now past, is kept"
        );
        assert!(
            d.admit("b", "R", "x", at(11_000)),
            "an entry past the window no longer suppresses its Event, scanned or not"
        );
        d.expire(at(21_500));
        assert!(d.is_empty(), "scanned again after a second");
    }
}
