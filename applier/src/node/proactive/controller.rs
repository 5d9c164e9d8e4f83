//! The loop's rule, pure: from one container's sample (its `memory.pressure` `some` total and
//! its `memory.current`) and its state, the action of this interval and the state after.
//!
//! senpai's rule (TMO): while the container's memory stall over an interval stays under the
//! target, ask the kernel for a step of its memory, the smaller the closer the stall is to the
//! target; at or above the target, back off and let the workload fault its memory back in.
//! A second signal beside the stall: the workload's refaults. Where a refault is cheap (fast
//! storage, or the pages still in a host's cache) reclaiming a hot set costs little stall, so
//! the stall alone would let the loop take a step from a hot container at every probe and the
//! container fault it back in the next second. When the container faulted back at least half
//! of what the last step took, the step took memory in use: the loop backs off as for a stall.
//! The floor is enforced here (the ask never passes `memory.current - floor`) because the
//! kernel does not: a cgroup's own `memory.min`/`memory.low` do not protect it from a
//! `memory.reclaim` written to that cgroup (see [`super::cgroup`]).
//!
//! Where we part from senpai's fixed step: the refault signal paces the loop. A container's
//! first step is small (`stepPermill / 32`); a step whose next interval was clean (no stall
//! at the target, less than an eighth of it faulted back) doubles the next one, past
//! `stepPermill`, up to a tenth of the container's memory per interval. An idle container's
//! cold memory goes in minutes instead of senpai's hours of 1% steps, while a hot one pays
//! for small probes only: any fault-back, stall or `EAGAIN` returns to the first step, and a
//! container that faulted back half a step is probed less and less often (1, 4, 16, then 64
//! intervals apart; a stall's back-off stops at 8). Google's far-memory bound, promotions at
//! most 0.2% of the working set a minute, is what the first step and that spacing keep.

use std::time::Duration;

use koord_api::ProactiveReclaimParams;

/// The memcg page: an ask below one is not worth a write.
const PAGE: u64 = koord_api::knobs::PAGE_SIZE.unsigned_abs();
/// The highest back-off level: a stall's back-off is `2^(level-1)` intervals (1, 2, 4, 8), a
/// refault's `4^(level-1)` (1, 4, 16, 64).
const MAX_LEVEL: u32 = 4;
/// The first step is `stepPermill / 2^FIRST_STEP_SHIFT`: 1/32, so five clean steps reach
/// `stepPermill`.
const FIRST_STEP_SHIFT: u32 = 5;
/// The grown step's ceiling, per mille of `memory.current` per interval: a tenth.
const MAX_GROWN_STEP_PERMILL: u128 = 100;
/// A step is clean when less than this share of it (1/8) faulted back in the next interval.
const CLEAN_REFAULT_SHARE_DIVISOR: u64 = 8;
/// The share of the last step the container may fault back in one interval before the loop
/// takes it for memory in use and backs off: a half.
const HOT_REFAULT_SHARE_DIVISOR: u64 = 2;

/// One container's loop between two intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopState {
    /// `memory.pressure` `some` total at the last sample, microseconds; `None` before the
    /// first (no stall measured yet).
    pub last_total: Option<u64>,
    /// Back-offs in a row (the stall at or above the target at each probe); 0 when probing.
    pub level: u32,
    /// Intervals still to wait, after a back-off, before the next probe.
    pub wait: u32,
    /// `workingset_refault_anon + workingset_refault_file` of `memory.stat` at the last
    /// sample, pages; `None` before the first or where it could not be read.
    pub last_refaults: Option<u64>,
    /// What the last interval's reclaim took, bytes (0 when it did not reclaim).
    pub took: u64,
    /// Clean steps in a row: the next step is `stepPermill × 2^clean / 32`, up to
    /// [`MAX_GROWN_STEP_PERMILL`].
    pub clean: u32,
}

/// What the loop read this interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// `some ... total=` of `memory.pressure`, microseconds since the cgroup was made.
    pub pressure_total_micros: u64,
    pub current_bytes: u64,
    /// The container's refaults so far (`memory.stat` `workingset_refault_anon` +
    /// `workingset_refault_file`), pages; `None` where it could not be read (no refault
    /// signal then, the stall alone decides).
    pub refault_pages: Option<u64>,
    /// Since the previous sample (the thread may wake late; the stall is scaled to one
    /// interval).
    pub elapsed: Duration,
}

/// What to do this interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The first sample of a container (or of a counter that went back): only the totals are
    /// kept; no reclaim on a stall that was not measured.
    Record,
    /// Ask `memory.reclaim` for this many bytes (never more than `current - floor`).
    Reclaim(u64),
    /// Under the target, but at the floor (or less than a page above it): nothing to ask.
    AtFloor,
    /// The stall reached the target: no reclaim, and the next probe in this many intervals.
    BackOff(u32),
    /// The container faulted back at least half of what the last step took (the step took
    /// memory in use): no reclaim, and the next probe in this many intervals (a stall or not).
    Refaulted(u32),
    /// Waiting out a back-off.
    Wait,
}

/// The action and the stall it was decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    /// The stall over the last interval (scaled to one interval), microseconds; `None` on the
    /// first sample.
    pub stall_micros: Option<u64>,
}

fn as_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The stall of `delta` µs over `elapsed`, scaled to one `interval`.
fn stall_per_interval(delta: u64, elapsed: Duration, interval: Duration) -> u64 {
    let elapsed = elapsed.as_micros();
    if elapsed == 0 {
        return delta;
    }
    let scaled = u128::from(delta) * interval.as_micros() / elapsed;
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

/// This interval's action for one container, and its state after.
///
/// - First sample: [`Action::Record`].
/// - In a back-off: [`Action::Wait`] (the totals still move on, so the next probe measures
///   one interval).
/// - The container faulted back half of the last step: [`Action::Refaulted`] for 1, 4, 16,
///   then 64 intervals, whatever the stall.
/// - Otherwise a stall at or above the target: [`Action::BackOff`] for 1, 2, 4, then 8
///   intervals.
/// - Under the target: a step of `current × stepPermill × 2^clean / 32 / 1000` (the growth
///   capped at a tenth of `current`), scaled by `(target - stall) / target`, capped at
///   `current - floor` and cut to whole pages; the back-off level is reset once a step proved
///   safe (the interval after it quiet), and `clean` counts the steps less than an eighth of
///   which faulted back (any more returns it to 0).
pub fn next_step(
    state: &LoopState,
    sample: Sample,
    params: &ProactiveReclaimParams,
    floor: u64,
) -> (Decision, LoopState) {
    let mut next = LoopState {
        last_total: Some(sample.pressure_total_micros),
        last_refaults: sample.refault_pages,
        took: 0,
        ..*state
    };
    let record = Decision {
        action: Action::Record,
        stall_micros: None,
    };
    let Some(last) = state.last_total else {
        return (record, next);
    };
    // A total never goes back for one cgroup; one that did is another cgroup by the same
    // name: measured from here.
    let Some(delta) = sample.pressure_total_micros.checked_sub(last) else {
        return (
            record,
            LoopState {
                last_refaults: sample.refault_pages,
                ..LoopState::default()
            }
            .with_total(sample.pressure_total_micros),
        );
    };
    let interval = Duration::from_secs(as_u64(params.interval_seconds).max(1));
    let stall = stall_per_interval(delta, sample.elapsed, interval);
    let decide = |action| Decision {
        action,
        stall_micros: Some(stall),
    };
    if state.wait > 0 {
        next.wait = state.wait - 1;
        return (decide(Action::Wait), next);
    }
    let target = as_u64(params.stall_target_micros).max(1);
    // What came back since the last sample, bytes; `None` without both counts (no refault
    // signal: the stall alone decides, and the step does not grow).
    let refaulted = match (state.last_refaults, sample.refault_pages) {
        (Some(before), Some(now)) => Some(now.saturating_sub(before).saturating_mul(PAGE)),
        _ => None,
    };
    let hot =
        state.took > 0 && refaulted.is_some_and(|r| r >= state.took / HOT_REFAULT_SHARE_DIVISOR);
    if stall >= target || hot {
        next.level = state.level.saturating_add(1).min(MAX_LEVEL);
        next.clean = 0;
        // A refault says the step took memory in use (whatever stall it caused): probe four
        // times less often at each level. A stall alone is the workload's moment: probe
        // again soon.
        let per_level = if hot { 2 } else { 1 };
        let intervals = 1u32 << (per_level * (next.level - 1));
        // The back-off's own interval is the first of them.
        next.wait = intervals - 1;
        let action = if hot {
            Action::Refaulted(intervals)
        } else {
            Action::BackOff(intervals)
        };
        return (decide(action), next);
    }
    // The back-off ends when a step proved safe: the interval after it showed neither a stall
    // nor the step faulted back. A probe after a wait keeps the level, so a hot container
    // (whose refaults show only after a step) is probed less and less often, as a stalling one
    // is.
    if state.took > 0 {
        next.level = 0;
        next.clean = match refaulted {
            Some(r) if r.saturating_mul(CLEAN_REFAULT_SHARE_DIVISOR) < state.took => {
                state.clean.saturating_add(1)
            }
            Some(_) => 0,
            // No refault signal: the stall alone grows the step to `stepPermill`, senpai's.
            None => state.clean.saturating_add(1).min(FIRST_STEP_SHIFT),
        };
    }
    let current = sample.current_bytes;
    let room = current.saturating_sub(floor);
    let step = step_bytes(current, params.step_permill, next.clean) * u128::from(target - stall)
        / u128::from(target);
    let ask = u64::try_from(step).unwrap_or(u64::MAX).min(room);
    let ask = ask - ask % PAGE;
    let action = if ask == 0 {
        Action::AtFloor
    } else {
        Action::Reclaim(ask)
    };
    (decide(action), next)
}

/// The step of `current` bytes after `clean` clean steps: `stepPermill / 32` doubled per
/// clean step, never above a tenth of `current` by growth (a `stepPermill` above it stays as
/// set).
fn step_bytes(current: u64, step_permill: i64, clean: u32) -> u128 {
    let current = u128::from(current);
    let base = current * u128::from(as_u64(step_permill)) / 1000;
    let ceiling = base.max(current * MAX_GROWN_STEP_PERMILL / 1000);
    ((base << clean.min(FIRST_STEP_SHIFT + 10)) >> FIRST_STEP_SHIFT).min(ceiling)
}

impl LoopState {
    fn with_total(mut self, total: u64) -> Self {
        self.last_total = Some(total);
        self
    }

    /// After this interval's reclaim took `bytes`: the next interval compares the
    /// container's refaults with it.
    pub fn after_reclaim(self, bytes: u64) -> Self {
        Self {
            took: bytes,
            ..self
        }
    }

    /// After a `memory.reclaim` the kernel answered `EAGAIN` (it found less to take than
    /// asked): nothing cold is left for now, so a light back-off, one interval skipped,
    /// without raising the level a stall would; the growth starts again from the base step.
    pub fn after_short(self) -> Self {
        Self {
            wait: self.wait.max(1),
            clean: 0,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const P: ProactiveReclaimParams = ProactiveReclaimParams {
        interval_seconds: 6,
        stall_target_micros: 10_000,
        step_permill: 10,
        floor_percent: 0,
    };

    fn sample(total: u64, current: u64) -> Sample {
        Sample {
            pressure_total_micros: total,
            current_bytes: current,
            refault_pages: None,
            elapsed: Duration::from_secs(6),
        }
    }

    fn probing(total: u64) -> LoopState {
        LoopState {
            last_total: Some(total),
            level: 0,
            wait: 0,
            last_refaults: None,
            took: 0,
            // Grown to the whole `stepPermill`.
            clean: FIRST_STEP_SHIFT,
        }
    }

    #[test]
    fn one_interval_decides_from_the_stall_the_floor_and_the_state() {
        struct Case {
            name: &'static str,
            state: LoopState,
            sample: Sample,
            floor: u64,
            want: Action,
            want_stall: Option<u64>,
        }
        let cases = [
            Case {
                name: "first tick: only the totals",
                state: LoopState::default(),
                sample: sample(5_000_000, 1000 * MIB),
                floor: 0,
                want: Action::Record,
                want_stall: None,
            },
            Case {
                name: "no stall: the whole step, 1% of current",
                state: probing(100),
                sample: sample(100, 1000 * MIB),
                floor: 0,
                want: Action::Reclaim(10 * MIB),
                want_stall: Some(0),
            },
            Case {
                name: "stall at half the target: half the step",
                state: probing(100),
                sample: sample(5_100, 1000 * MIB),
                floor: 0,
                want: Action::Reclaim(5 * MIB),
                want_stall: Some(5_000),
            },
            Case {
                name: "stall near the target: a tenth of the step, whole pages",
                state: probing(0),
                sample: sample(9_000, 1000 * MIB),
                floor: 0,
                want: Action::Reclaim(MIB - MIB % PAGE),
                want_stall: Some(9_000),
            },
            Case {
                name: "stall at the target: back off one interval",
                state: probing(0),
                sample: sample(10_000, 1000 * MIB),
                floor: 0,
                want: Action::BackOff(1),
                want_stall: Some(10_000),
            },
            Case {
                name: "the floor caps the ask",
                state: probing(0),
                sample: sample(0, 1000 * MIB),
                floor: 997 * MIB,
                want: Action::Reclaim(3 * MIB),
                want_stall: Some(0),
            },
            Case {
                name: "current at the floor: nothing",
                state: probing(0),
                sample: sample(0, 500 * MIB),
                floor: 500 * MIB,
                want: Action::AtFloor,
                want_stall: Some(0),
            },
            Case {
                name: "current below the floor: nothing",
                state: probing(0),
                sample: sample(0, 400 * MIB),
                floor: 500 * MIB,
                want: Action::AtFloor,
                want_stall: Some(0),
            },
            Case {
                name: "less than a page above the floor: nothing",
                state: probing(0),
                sample: sample(0, 500 * MIB + 100),
                floor: 500 * MIB,
                want: Action::AtFloor,
                want_stall: Some(0),
            },
            Case {
                name: "a late wake-up: the stall is scaled to one interval",
                state: probing(0),
                sample: Sample {
                    elapsed: Duration::from_secs(12),
                    ..sample(12_000, 1000 * MIB)
                },
                floor: 0,
                want: Action::Reclaim(4 * MIB - (4 * MIB) % PAGE),
                want_stall: Some(6_000),
            },
            Case {
                name: "a total that went back (another cgroup): measured from here",
                state: probing(9_000_000),
                sample: sample(10, 1000 * MIB),
                floor: 0,
                want: Action::Record,
                want_stall: None,
            },
            Case {
                name: "waiting out a back-off: no reclaim whatever the stall",
                state: LoopState {
                    last_total: Some(0),
                    level: 2,
                    wait: 1,
                    ..LoopState::default()
                },
                sample: sample(0, 1000 * MIB),
                floor: 0,
                want: Action::Wait,
                want_stall: Some(0),
            },
        ];
        for c in cases {
            let (got, _) = next_step(&c.state, c.sample, &P, c.floor);
            assert_eq!(got.action, c.want, "{}", c.name);
            assert_eq!(got.stall_micros, c.want_stall, "{}", c.name);
        }
    }

    /// The last step took 10 MiB: the container faulting back half of it (2,560 pages) in the
    /// next interval backs the loop off although the stall is 0; less, or no step, or no
    /// refault count, does not.
    #[test]
    fn refaulting_half_the_last_step_backs_off_like_a_stall() {
        const PAGES_5_MIB: u64 = 5 * MIB / PAGE;
        let took = |last_refaults, took| LoopState {
            last_refaults,
            took,
            ..probing(0)
        };
        let with = |pages| Sample {
            refault_pages: pages,
            ..sample(0, 1000 * MIB)
        };
        for (name, state, sample, want) in [
            (
                "half faulted back: hot",
                took(Some(100), 10 * MIB),
                with(Some(100 + PAGES_5_MIB)),
                Action::Refaulted(1),
            ),
            (
                "a fifth faulted back: back to the first step, 1/32 of the whole",
                took(Some(100), 10 * MIB),
                with(Some(100 + PAGES_5_MIB / 2)),
                Action::Reclaim(10 * MIB / 32),
            ),
            (
                "refaults without a step before (another cause): the step",
                took(Some(100), 0),
                with(Some(100 + 10 * PAGES_5_MIB)),
                Action::Reclaim(10 * MIB),
            ),
            (
                "half faulted back with a stall: a refault's back-off",
                took(Some(100), 10 * MIB),
                Sample {
                    refault_pages: Some(100 + PAGES_5_MIB),
                    ..sample(20_000, 1000 * MIB)
                },
                Action::Refaulted(1),
            ),
            (
                "no refault count: the stall alone",
                took(None, 10 * MIB),
                with(None),
                Action::Reclaim(10 * MIB),
            ),
        ] {
            let (got, next) = next_step(&state, sample, &P, 0);
            assert_eq!(got.action, want, "{name}");
            assert_eq!(next.took, 0, "{name}: the worker sets what a reclaim took");
            assert_eq!(next.last_refaults, sample.refault_pages, "{name}");
        }
        // A hot container: every step faulted back. The back-offs grow 1, 4, 16, then 64
        // intervals (the probes after each wait keep the level), and each probe is the first
        // step: at the defaults 0.03% of the working set per probe, 0.1% in the first minute
        // (three probes), then one per 6.5 minutes.
        let mut state = LoopState {
            clean: 0,
            ..took(Some(0), 0)
        };
        let mut refaults = 0;
        let mut backoffs = Vec::new();
        let mut steps = 0;
        for _ in 0..400 {
            let (d, next) = next_step(&state, with(Some(refaults)), &P, 0);
            state = next;
            match d.action {
                Action::Reclaim(bytes) => {
                    steps += 1;
                    state = state.after_reclaim(bytes);
                    // All of it faulted back during the next interval.
                    refaults += bytes / PAGE;
                }
                Action::Refaulted(n) => backoffs.push(n),
                Action::Wait => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(&backoffs[..6], [1, 4, 16, 64, 64, 64]);
        // Four probes in the first 89 intervals, then one every 65, each the first step.
        assert_eq!(steps, 9, "steps in 400 intervals of a hot container");
        assert_eq!(
            refaults * PAGE,
            9 * 10 * MIB / 32,
            "what the hot container faulted back"
        );
    }

    /// An idle container: every step clean (nothing faulted back), so the step doubles from
    /// 1/32 of `stepPermill` (0.03% of `memory.current` at the defaults) past it (1%) to a tenth
    /// in ten intervals; a step an eighth of which came back returns to the first step without
    /// a back-off; without a refault count the step grows to `stepPermill`, not past it.
    #[test]
    fn clean_steps_grow_to_a_tenth_and_a_fault_back_returns_to_the_first_step() {
        const KIB: u64 = 1 << 10;
        let run = |refaults: Option<u64>, n: usize| {
            let mut state = LoopState {
                last_refaults: refaults,
                ..LoopState::default().with_total(0)
            };
            let mut asks = Vec::new();
            for _ in 0..n {
                let s = Sample {
                    refault_pages: refaults,
                    ..sample(0, 1000 * MIB)
                };
                let (d, next) = next_step(&state, s, &P, 0);
                let Action::Reclaim(bytes) = d.action else {
                    panic!("{d:?}");
                };
                asks.push(bytes / KIB);
                state = next.after_reclaim(bytes);
            }
            (asks, state)
        };
        let (asks, state) = run(Some(0), 11);
        assert_eq!(
            asks,
            [
                320, 640, 1280, 2560, 5120, 10240, 20480, 40960, 81920, 102400, 102400
            ]
        );
        let (asks, _) = run(None, 8);
        assert_eq!(asks, [320, 640, 1280, 2560, 5120, 10240, 10240, 10240]);
        // An eighth of the 100 MiB step faulted back: the first step, no back-off.
        let warm = Sample {
            refault_pages: Some(100 * MIB / 8 / PAGE),
            ..sample(0, 1000 * MIB)
        };
        let (d, next) = next_step(&state, warm, &P, 0);
        assert_eq!((d.action, next.clean), (Action::Reclaim(320 * KIB), 0));
        // The stall still scales a grown step (half the target: half of 40 MiB).
        let grown = LoopState {
            clean: 7,
            took: 0,
            ..state
        };
        let half = Sample {
            refault_pages: state.last_refaults,
            ..sample(5_000, 1000 * MIB)
        };
        let (d, _) = next_step(&grown, half, &P, 0);
        assert_eq!(d.action, Action::Reclaim(20 * MIB));
        // A stepPermill above the ceiling stays as set; below it, growth stops at a tenth.
        assert_eq!(step_bytes(1000, 200, 12), 200);
        assert_eq!(step_bytes(1000, 10, 12), 100);
        // The kernel's EAGAIN (nothing cold left) starts the growth again.
        assert_eq!(grown.after_short().clean, 0);
    }

    /// The stall stays high: back-offs of 1, 2, 4, 8, 8 intervals, with no reclaim in
    /// between; then a low stall probes again with the whole step and resets the level.
    #[test]
    fn back_off_grows_to_eight_intervals_and_resets_when_the_stall_is_low() {
        let mut state = probing(0);
        let mut total = 0;
        let mut actions = Vec::new();
        for _ in 0..20 {
            total += 50_000;
            let (d, next) = next_step(&state, sample(total, 1000 * MIB), &P, 0);
            actions.push(d.action);
            state = next;
        }
        let backoffs: Vec<u32> = actions
            .iter()
            .filter_map(|a| match a {
                Action::BackOff(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(backoffs, [1, 2, 4, 8, 8]);
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Reclaim(_))),
            "never reclaims while the stall is high: {actions:?}"
        );
        // The gaps between back-offs are the waits: 0, 1, 3, 7 intervals.
        let waits: Vec<usize> = actions
            .split(|a| matches!(a, Action::BackOff(_)))
            .skip(1)
            .map(<[Action]>::len)
            .collect();
        assert_eq!(&waits[..4], [0, 1, 3, 7]);
        // Wait out the current back-off with a quiet container, then probe.
        let mut probe = None;
        for _ in 0..8 {
            let (d, next) = next_step(&state, sample(total, 1000 * MIB), &P, 0);
            state = next;
            if d.action != Action::Wait {
                probe = Some(d.action);
                break;
            }
        }
        // After a back-off, the first step (1/32 of the whole).
        assert_eq!(probe, Some(Action::Reclaim(10 * MIB / 32)));
        assert_eq!(
            state.level, 4,
            "a probe keeps the level until its step proves safe"
        );
        // The step taken, the next interval quiet: the level resets, the step doubles.
        state = state.after_reclaim(10 * MIB / 32);
        let (d, next) = next_step(&state, sample(total, 1000 * MIB), &P, 0);
        assert_eq!(d.action, Action::Reclaim(10 * MIB / 16));
        assert_eq!(next.level, 0, "a safe step resets the back-off");
        total += 50_000;
        let (d, _) = next_step(&next, sample(total, 1000 * MIB), &P, 0);
        assert_eq!(
            d.action,
            Action::BackOff(1),
            "starts again from one interval"
        );
    }

    #[test]
    fn a_short_reclaim_skips_one_interval_without_raising_the_level() {
        let (d, state) = next_step(&probing(0), sample(0, 1000 * MIB), &P, 0);
        assert_eq!(d.action, Action::Reclaim(10 * MIB));
        let state = state.after_short();
        assert_eq!((state.level, state.wait), (0, 1));
        let (d, state) = next_step(&state, sample(0, 990 * MIB), &P, 0);
        assert_eq!(d.action, Action::Wait);
        // Then the first step again: nothing cold was left.
        let (d, _) = next_step(&state, sample(0, 990 * MIB), &P, 0);
        let first = 9_900 * MIB / 1000 / 32;
        assert_eq!(d.action, Action::Reclaim(first - first % PAGE));
        // A longer back-off in force is not shortened by a short reclaim.
        let long = LoopState {
            last_total: Some(0),
            level: 3,
            wait: 3,
            ..LoopState::default()
        };
        assert_eq!(long.after_short().wait, 3);
    }
}
