//! The reclaim worker: one thread, one tick per `--async-reclaim-interval-ms`, one `pread` of
//! `memory.current` per registered container per tick, a `memory.reclaim` write where
//! [`Pace::step`] says so. The limits (`memory.max`, `memory.high`) are re-read once a second,
//! so an in-place resize moves the watermarks within a second.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::time::{Duration, Instant};

use super::pace::{Bounds, Budget, Pace, Reclaimed, Step};
use super::watermarks::{Watermarks, parse_limit};
use super::{AsyncReclaim, Key, Registration};
use crate::reclaim::metrics::ReclaimMetrics;

/// The limits are re-read this often.
const LIMITS_EVERY: Duration = Duration::from_secs(1);

pub(super) fn run(shared: &AsyncReclaim) {
    let mut worker = Worker::new(shared);
    loop {
        shared.wait_for_targets();
        worker.tick();
        std::thread::sleep(shared.settings.interval);
    }
}

/// The worker's state between ticks; [`Worker::tick`] is one look at every registered
/// container (public for the benchmark of its cost).
pub struct Worker<'a> {
    shared: &'a AsyncReclaim,
    clock: Instant,
    bounds: Bounds,
    budget: Budget,
    tracked: BTreeMap<Key, Tracked>,
    limits_at: Duration,
}

impl<'a> Worker<'a> {
    pub fn new(shared: &'a AsyncReclaim) -> Self {
        Self {
            shared,
            clock: Instant::now(),
            bounds: Bounds::default(),
            budget: Budget::percent_of_a_core(shared.settings.cpu_percent),
            tracked: BTreeMap::new(),
            limits_at: Duration::ZERO,
        }
    }

    /// Takes in the registry's changes, then looks at every container once; returns how many.
    pub fn tick(&mut self) -> usize {
        let snapshot = self.shared.snapshot();
        self.tracked
            .retain(|k, _| snapshot.iter().any(|(s, _)| s == k));
        for (key, reg) in snapshot {
            match self.tracked.get_mut(&key) {
                Some(t) if t.reg == reg => {}
                Some(t) => *t = Tracked::new(reg),
                None => {
                    self.tracked.insert(key, Tracked::new(reg));
                }
            }
        }
        let now = self.clock.elapsed();
        let read_limits = now >= self.limits_at;
        if read_limits {
            self.limits_at = now + LIMITS_EVERY;
        }
        let metrics = self.shared.metrics.as_ref();
        for t in self.tracked.values_mut() {
            t.tick(now, read_limits, &self.bounds, &mut self.budget, metrics);
        }
        if let Some(m) = metrics {
            m.containers
                .set(i64::try_from(self.tracked.len()).unwrap_or(i64::MAX));
        }
        self.tracked.len()
    }
}

/// One container's open files and pace.
struct Tracked {
    reg: Registration,
    current: Option<File>,
    reclaim: Option<File>,
    wm: Option<Watermarks>,
    pace: Pace,
}

impl Tracked {
    fn new(reg: Registration) -> Self {
        Self {
            reg,
            current: None,
            reclaim: None,
            wm: None,
            pace: Pace::default(),
        }
    }

    fn tick(
        &mut self,
        now: Duration,
        read_limits: bool,
        bounds: &Bounds,
        budget: &mut Budget,
        metrics: Option<&ReclaimMetrics>,
    ) {
        if read_limits || self.wm.is_none() {
            self.wm = self.watermarks();
        }
        let (Some(wm), Some(current)) = (self.wm, self.usage()) else {
            return;
        };
        let Step::Reclaim(bytes) = self.pace.step(now, current, wm, bounds) else {
            return;
        };
        if !budget.allows(now) {
            if let Some(m) = metrics {
                m.over_budget.inc();
            }
            return;
        }
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let wrote = self.ask(bytes);
        budget.spend(thread_cpu().saturating_sub(cpu0));
        let spent = t0.elapsed();
        let after = self.usage().unwrap_or(current);
        let (outcome, result, got) = match wrote {
            Ok(()) => (Reclaimed::Full, "full", bytes),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                (Reclaimed::Short, "short", current.saturating_sub(after))
            }
            Err(e) => {
                tracing::debug!(dir = %self.reg.dir.display(), error = %e, "memory.reclaim failed");
                self.reclaim = None;
                (Reclaimed::Short, "failed", 0)
            }
        };
        self.pace.done(now, outcome, after, bounds);
        if let Some(m) = metrics {
            let pod = [self.reg.namespace.as_str(), self.reg.pod.as_str()];
            m.bytes.with_label_values(&pod).inc_by(got);
            m.seconds
                .with_label_values(&pod)
                .inc_by(spent.as_secs_f64());
            m.passes.with_label_values(&[pod[0], pod[1], result]).inc();
        }
    }

    /// The watermarks from the container's limits now (`None`: unlimited or unreadable).
    fn watermarks(&self) -> Option<Watermarks> {
        let read = |file: &str| {
            std::fs::read_to_string(self.reg.dir.join(file))
                .ok()
                .and_then(|t| parse_limit(&t).ok())
        };
        let max = read("memory.max")?;
        let high = read("memory.high")?;
        Watermarks::of(max, high, self.reg.ratio, self.reg.scale_factor)
    }

    /// `memory.current`, with the file kept open (one `pread`).
    fn usage(&mut self) -> Option<u64> {
        if self.current.is_none() {
            self.current = File::open(self.reg.dir.join("memory.current")).ok();
        }
        let mut buf = [0u8; 32];
        let n = self.current.as_ref()?.read_at(&mut buf, 0);
        let parsed = n
            .ok()
            .and_then(|n| std::str::from_utf8(&buf[..n]).ok())
            .and_then(|s| s.trim().parse().ok());
        if parsed.is_none() {
            // The cgroup went (a restarted container): opened again when it is back.
            self.current = None;
        }
        parsed
    }

    fn ask(&mut self, bytes: u64) -> std::io::Result<()> {
        let f = match &self.reclaim {
            Some(f) => f,
            None => self.reclaim.insert(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(self.reg.dir.join("memory.reclaim"))?,
            ),
        };
        f.write_at(bytes.to_string().as_bytes(), 0).map(|_| ())
    }
}

/// This thread's CPU time (user and system: the kernel's reclaim runs in this thread).
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}
