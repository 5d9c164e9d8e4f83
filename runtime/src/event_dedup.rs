//! Which Events to post: an Event identical to one already posted about the same object
//! (same uid, reason and message) within a window is dropped, so a component that reaches the
//! same conclusion every pass, or fights another writer, cannot flood the API server.
//!
//! kube-runtime's `Recorder` is not used by either binary: it keys its series on the reason
//! without the message, so a changed message would be recorded as a repeat of the old text.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Remembers what was posted per object so identical Events are posted once per window.
#[derive(Debug)]
pub struct EventDedup {
    window: Duration,
    seen: HashMap<(String, &'static str, String), Instant>,
}

impl EventDedup {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            seen: HashMap::new(),
        }
    }

    /// Whether the Event (`uid`, `reason`, `message`) should be posted now; records it if so.
    pub fn admit(&mut self, uid: &str, reason: &'static str, message: &str, now: Instant) -> bool {
        let key = (uid.to_owned(), reason, message.to_owned());
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
        self.seen.retain(|(u, _, _), _| u != uid);
    }

    /// Drops entries older than the window (bounded memory).
    pub fn expire(&mut self, now: Instant) {
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
}
