//! When to reclaim from one container and how much: the Alibaba kernel's background worker,
//! played by a poller. Pure: the worker ([`super::worker`]) reads `memory.current`, asks
//! [`Pace::step`], writes `memory.reclaim` and reports back with [`Pace::done`].
//!
//! The kernel's worker starts the moment usage passes `wmark_high`; a poller sees usage once a
//! tick, so it looks one tick ahead (usage plus the growth of the last ticks) and reclaims down
//! to `wmark_low` or further, to two ticks of growth below `wmark_high` — a stream that fills
//! the page cache would otherwise reach the limit between two looks, and the container's own
//! allocations would reclaim at the limit (the direct reclaim this feature exists to avoid).
//! A container the kernel cannot reclaim (anonymous memory without swap) answers short: it
//! backs off, doubling up to a bound, and is counted rather than retried every tick.

use std::time::Duration;

use super::watermarks::Watermarks;
use crate::node::shared::reclaim_slice::{SLICE_GAP, WRITE_SLICE};

/// Bounds of one container's reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most one `memory.reclaim` write asks for (one call's time is bounded by it).
    pub max_chunk: u64,
    /// The first wait after a short reclaim; doubled per short one in a row.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// One reclaim is written in slices of at most this many bytes, with [`Bounds::slice_gap`]
    /// asleep between them ([`crate::node::shared::reclaim_slice`] says why).
    pub write_slice: u64,
    pub slice_gap: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_chunk: 64 << 20,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            write_slice: WRITE_SLICE,
            slice_gap: SLICE_GAP,
        }
    }
}

/// `bytes` cut into writes of at most `slice` (the last one the rest; none for 0).
pub fn slices(bytes: u64, slice: u64) -> impl Iterator<Item = u64> {
    let slice = slice.max(1);
    let mut left = bytes;
    std::iter::from_fn(move || {
        let n = left.min(slice);
        left -= n;
        (n > 0).then_some(n)
    })
}

/// What to do at this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Below `wmark_high`, one tick ahead included.
    Idle,
    /// Ask the kernel for this many bytes.
    Reclaim(u64),
    /// Above `wmark_high` but backing off after a short reclaim.
    BackingOff,
}

/// How a `memory.reclaim` write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaimed {
    /// The kernel reclaimed what was asked.
    Full,
    /// It could not (`EAGAIN`): nothing more to take, for now.
    Short,
}

/// Short reclaims in a row and the wait they earned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    shorts: u32,
    /// Back-off until this time (the worker's clock).
    resume_at: Option<Duration>,
}

impl Backoff {
    /// Whether a write must wait.
    pub fn waiting(&self, now: Duration) -> bool {
        self.resume_at.is_some_and(|at| now < at)
    }

    /// A write's end: a full one clears the back-off, a short one doubles it up to the bound.
    pub fn record(&mut self, now: Duration, outcome: Reclaimed, b: &Bounds) {
        match outcome {
            Reclaimed::Full => {
                self.shorts = 0;
                self.resume_at = None;
            }
            Reclaimed::Short => {
                self.shorts = self.shorts.saturating_add(1);
                let factor = 1u32 << self.shorts.saturating_sub(1).min(16);
                let wait = b.backoff.saturating_mul(factor).min(b.max_backoff);
                self.resume_at = Some(now + wait);
            }
        }
    }

    pub fn shorts(&self) -> u32 {
        self.shorts
    }
}

/// One container's pace: its recent growth and its back-off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pace {
    last: Option<u64>,
    /// Growth per tick, the larger of the last tick's and half the previous estimate (a
    /// burst is remembered for a few ticks, then forgotten).
    growth: u64,
    backoff: Backoff,
}

impl Pace {
    /// This tick's decision, given the usage read now.
    pub fn step(&mut self, now: Duration, current: u64, wm: Watermarks, b: &Bounds) -> Step {
        let grew = self.last.map_or(0, |l| current.saturating_sub(l));
        self.growth = grew.max(self.growth / 2);
        self.last = Some(current);
        if current.saturating_add(self.growth) <= wm.high {
            return Step::Idle;
        }
        if self.backoff.waiting(now) {
            return Step::BackingOff;
        }
        // Down to wmark_low, or lower when the container grows faster than the gap; never
        // below half of wmark_high (one burst does not empty a container's cache).
        let target = wm
            .low
            .min(wm.high.saturating_sub(self.growth.saturating_mul(2)))
            .max(wm.high / 2);
        match current.saturating_sub(target).min(b.max_chunk) {
            0 => Step::Idle,
            bytes => Step::Reclaim(bytes),
        }
    }

    /// The write's end and the usage read after it.
    pub fn done(&mut self, now: Duration, outcome: Reclaimed, current_after: u64, b: &Bounds) {
        self.last = Some(current_after);
        self.backoff.record(now, outcome, b);
    }

    /// Short reclaims in a row.
    pub fn shorts(&self) -> u32 {
        self.backoff.shorts()
    }
}

/// The worker's CPU budget: at most `allowance` of its own CPU time per `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    window: Duration,
    allowance: Duration,
    window_start: Duration,
    used: Duration,
}

impl Budget {
    /// `percent` of one core, counted per second.
    pub fn percent_of_a_core(percent: u32) -> Self {
        let window = Duration::from_secs(1);
        Self {
            window,
            allowance: window * percent / 100,
            window_start: Duration::ZERO,
            used: Duration::ZERO,
        }
    }

    /// Whether there is time left in the window that holds `now`.
    pub fn allows(&mut self, now: Duration) -> bool {
        if now.saturating_sub(self.window_start) >= self.window {
            self.window_start = now;
            self.used = Duration::ZERO;
        }
        self.used < self.allowance
    }

    pub fn spend(&mut self, cpu: Duration) {
        self.used = self.used.saturating_add(cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reclaim_is_written_in_slices() {
        const MIB: u64 = 1 << 20;
        for (bytes, slice, want) in [
            (0, 2 * MIB, vec![]),
            (MIB, 2 * MIB, vec![MIB]),
            (2 * MIB, 2 * MIB, vec![2 * MIB]),
            (5 * MIB + 7, 2 * MIB, vec![2 * MIB, 2 * MIB, MIB + 7]),
            (3, 0, vec![1, 1, 1]),
        ] {
            let got: Vec<u64> = slices(bytes, slice).collect();
            assert_eq!(got, want, "{bytes} in slices of {slice}");
            assert_eq!(got.iter().sum::<u64>(), bytes);
        }
    }

    const MIB: u64 = 1 << 20;
    const WM: Watermarks = Watermarks {
        high: 95 * MIB,
        low: 94 * MIB,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn each_tick_decides_from_usage_growth_and_backoff() {
        struct Case {
            name: &'static str,
            /// (usage, what the step says) per tick, 100 ms apart.
            ticks: &'static [(u64, Step)],
        }
        let cases = [
            Case {
                name: "below wmark_high: nothing",
                ticks: &[
                    (90 * MIB, Step::Idle),
                    (91 * MIB, Step::Idle),
                    (92 * MIB, Step::Idle),
                ],
            },
            Case {
                name: "a still container just above wmark_high goes down to wmark_low",
                ticks: &[(96 * MIB, Step::Reclaim(2 * MIB))],
            },
            Case {
                // +20 MiB a tick: looked at one tick ahead, and reclaimed to two ticks of
                // growth below wmark_high (95 - 40 = 55 MiB).
                name: "a growing container is caught a tick ahead, with room for two ticks",
                ticks: &[
                    (50 * MIB, Step::Idle),
                    (70 * MIB, Step::Idle),
                    (90 * MIB, Step::Reclaim(35 * MIB)),
                ],
            },
            Case {
                // +60 MiB a tick would leave a target below half of wmark_high: held at it.
                name: "never below half of wmark_high",
                ticks: &[
                    (30 * MIB, Step::Idle),
                    (90 * MIB, Step::Reclaim(90 * MIB - 95 * MIB / 2)),
                ],
            },
            Case {
                name: "one call asks for at most the chunk",
                ticks: &[(0, Step::Idle), (400 * MIB, Step::Reclaim(64 * MIB))],
            },
        ];
        let wm_big = Watermarks {
            high: 380 * MIB,
            low: 379 * MIB,
        };
        for c in cases {
            let mut p = Pace::default();
            let wm = if c.name.starts_with("one call") {
                wm_big
            } else {
                WM
            };
            for (i, (usage, want)) in c.ticks.iter().enumerate() {
                let got = p.step(ms(100 * i as u64), *usage, wm, &Bounds::default());
                assert_eq!(got, *want, "{}: tick {i}", c.name);
            }
        }
    }

    #[test]
    fn short_reclaims_back_off_doubling_to_the_bound_and_a_full_one_resets() {
        let b = Bounds::default();
        let mut p = Pace::default();
        let mut now = ms(0);
        let mut waits = Vec::new();
        for _ in 0..7 {
            assert!(matches!(p.step(now, 96 * MIB, WM, &b), Step::Reclaim(_)));
            p.done(now, Reclaimed::Short, 96 * MIB, &b);
            let start = now;
            // Backing off until the wait is over, however often it is asked.
            loop {
                now += ms(100);
                match p.step(now, 96 * MIB, WM, &b) {
                    Step::BackingOff => {}
                    Step::Reclaim(_) => break,
                    Step::Idle => panic!("above wmark_high"),
                }
            }
            waits.push((now - start).as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(p.shorts(), 7);
        p.done(now, Reclaimed::Full, 94 * MIB, &b);
        assert_eq!(p.shorts(), 0);
        // Not backing off: 94 -> 96 MiB is 2 MiB of growth, so down to 95 - 4 = 91 MiB.
        assert_eq!(
            p.step(now + ms(100), 96 * MIB, WM, &b),
            Step::Reclaim(5 * MIB)
        );
    }

    #[test]
    fn the_budget_is_per_second_window() {
        let mut b = Budget::percent_of_a_core(5);
        assert!(b.allows(ms(0)));
        b.spend(ms(30));
        assert!(b.allows(ms(500)));
        b.spend(ms(20));
        assert!(!b.allows(ms(900)), "50 ms of 50 spent");
        assert!(b.allows(ms(1000)), "a new window");
        b.spend(ms(80));
        assert!(!b.allows(ms(1999)));
        assert!(b.allows(ms(2000)));
    }
}
