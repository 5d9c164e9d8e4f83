//! A token bucket for the re-resolver's API requests (pure: the caller passes the time).
//!
//! `qps` tokens per second, at most `burst` saved up. A request takes one token; when none is
//! left it is reserved ahead and the caller sleeps for the returned wait, so requests leave at
//! the configured rate, in order, without a polling loop.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// May go negative: tokens reserved by callers that are still waiting.
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps` must be positive (the flags check it), `burst` at least 1.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes one token; returns how long to wait before using it (zero when one was there).
    pub fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 3, t0);
        let waits: Vec<Duration> = (0..5).map(|_| b.take(t0)).collect();
        assert_eq!(
            waits,
            [
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
                Duration::from_millis(100),
                Duration::from_millis(200)
            ]
        );
        // One second later: the two reserved tokens are paid back, the bucket refilled to 3.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.take(t1), Duration::ZERO);
        assert_eq!(b.take(t1), Duration::ZERO);
        assert_eq!(b.take(t1), Duration::ZERO);
        assert_eq!(b.take(t1), Duration::from_millis(100));
    }

    #[test]
    fn a_long_idle_time_saves_only_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(5.0, 2, t0);
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.take(later), Duration::ZERO);
        assert_eq!(b.take(later), Duration::ZERO);
        assert_eq!(b.take(later), Duration::from_millis(200));
    }

    #[test]
    fn n_requests_take_n_minus_burst_over_qps() {
        // The figure the defaults are chosen by: 1,000 writes at qps 50 / burst 100.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50.0, 100, t0);
        let last = (0..1000).map(|_| b.take(t0)).last().expect("some");
        assert!((last.as_secs_f64() - 18.0).abs() < 1e-6, "{last:?}");
    }
}
