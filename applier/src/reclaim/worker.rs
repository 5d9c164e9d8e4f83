//! The reclaim worker: one thread, one tick per `--async-reclaim-interval-ms`. Each tick: one
//! `pread` of `memory.current` per registered container and a `memory.reclaim` write where
//! [`Pace::step`] says so (async reclaim); then, when a BE container is registered, one read of
//! `/proc/zoneinfo` and, below the floor [`BeFirst::step`] sets, `memory.reclaim` writes to the
//! BE containers, the largest first ([`share`]). The limits (`memory.max`, `memory.high`) are
//! re-read once a second, so an in-place resize moves the watermarks within a second.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::be_first::{BeFirst, share};
use super::pace::{Backoff, Bounds, Budget, Pace, Reclaimed, Step};
use super::watermarks::{Watermarks, parse_limit};
use super::zoneinfo::parse_zoneinfo;
use super::{AsyncReclaim, Key, Registration};
use crate::reclaim::metrics::ReclaimMetrics;

/// The limits are re-read this often.
const LIMITS_EVERY: Duration = Duration::from_secs(1);
/// The memcg page (the contract's, as the pod pass compares in it).
const PAGE: u64 = koord_api::knobs::PAGE_SIZE.unsigned_abs();

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
    be_first: BeFirst,
    zoneinfo: PathBuf,
    /// The registry's generation `tracked` was last synced to (`None`: never).
    synced: Option<u64>,
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
            be_first: BeFirst::default(),
            zoneinfo: shared.settings.proc_root.join("zoneinfo"),
            synced: None,
        }
    }

    /// Takes in the registry's changes, then looks at every container once; returns how many.
    pub fn tick(&mut self) -> usize {
        self.sync();
        let now = self.clock.elapsed();
        let read_limits = now >= self.limits_at;
        if read_limits {
            self.limits_at = now + LIMITS_EVERY;
        }
        let metrics = self.shared.metrics.as_ref();
        for t in self.tracked.values_mut() {
            t.tick(now, read_limits, &self.bounds, &mut self.budget, metrics);
        }
        self.be_first_pass(now);
        if let Some(m) = metrics {
            m.containers
                .set(i64::try_from(self.tracked.len()).unwrap_or(i64::MAX));
        }
        self.tracked.len()
    }

    /// Takes in the registry's changes, if it has moved since the last tick (a steady node
    /// copies nothing).
    fn sync(&mut self) {
        let generation = self.shared.generation();
        if self.synced == Some(generation) {
            return;
        }
        self.synced = Some(generation);
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
    }

    /// Below the floor: the BE containers' share of the deficit, the largest first.
    fn be_first_pass(&mut self, now: Duration) {
        let adj = self
            .tracked
            .values()
            .map(|t| t.reg.min_adj)
            .max()
            .unwrap_or(0);
        if adj <= 0 {
            return;
        }
        let Some(node) = std::fs::read_to_string(&self.zoneinfo)
            .ok()
            .and_then(|t| parse_zoneinfo(&t))
        else {
            return;
        };
        let metrics = self.shared.metrics.as_ref();
        if let Some(m) = metrics {
            m.node_free
                .set(i64::try_from(node.free * PAGE).unwrap_or(i64::MAX));
        }
        let pages = self.be_first.step(&node, adj);
        if pages == 0 {
            return;
        }
        if let Some(m) = metrics {
            m.be_first_episodes.inc();
        }
        let be: Vec<&mut Tracked> = self
            .tracked
            .values_mut()
            .filter(|t| t.reg.min_adj > 0 && !t.be_backoff.waiting(now))
            .collect();
        let usage: Vec<u64> = be.iter().map(|t| t.last_usage.unwrap_or(0)).collect();
        let asks = share(pages * PAGE, &usage, self.bounds.max_chunk);
        let mut freed = 0;
        for (t, ask) in be.into_iter().zip(asks) {
            if ask == 0 {
                continue;
            }
            if !self.budget.allows(now) {
                if let Some(m) = metrics {
                    m.over_budget.inc();
                }
                break;
            }
            let (outcome, got) = t.reclaim(ask, &mut self.budget, metrics, "be-first");
            t.be_backoff.record(now, outcome, &self.bounds);
            freed += got;
        }
        self.be_first.reclaimed(freed / PAGE);
    }
}

/// One container's open files, pace and back-off.
struct Tracked {
    reg: Registration,
    current: Option<File>,
    reclaim: Option<File>,
    wm: Option<Watermarks>,
    pace: Pace,
    be_backoff: Backoff,
    last_usage: Option<u64>,
}

impl Tracked {
    fn new(reg: Registration) -> Self {
        Self {
            reg,
            current: None,
            reclaim: None,
            wm: None,
            pace: Pace::default(),
            be_backoff: Backoff::default(),
            last_usage: None,
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
        if self.reg.ratio > 0 && (read_limits || self.wm.is_none()) {
            self.wm = self.watermarks();
        }
        self.last_usage = self.usage();
        let (Some(wm), Some(current)) = (self.wm, self.last_usage) else {
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
        let (outcome, _) = self.reclaim(bytes, budget, metrics, "wmark");
        let after = self.usage().unwrap_or(current);
        self.pace.done(now, outcome, after, bounds);
    }

    /// One `memory.reclaim` write of `bytes`, its CPU time spent from `budget`, counted under
    /// `why`; how it ended and the bytes taken (all of them when the kernel says so, else the
    /// drop of `memory.current`).
    fn reclaim(
        &mut self,
        bytes: u64,
        budget: &mut Budget,
        metrics: Option<&ReclaimMetrics>,
        why: &str,
    ) -> (Reclaimed, u64) {
        let before = self.last_usage.unwrap_or(0);
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let wrote = self.ask(bytes);
        budget.spend(thread_cpu().saturating_sub(cpu0));
        let spent = t0.elapsed();
        let (outcome, result, got) = match wrote {
            Ok(()) => (Reclaimed::Full, "full", bytes),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                let after = self.usage().unwrap_or(before);
                (Reclaimed::Short, "short", before.saturating_sub(after))
            }
            Err(e) => {
                tracing::debug!(dir = %self.reg.dir.display(), error = %e, "memory.reclaim failed");
                self.reclaim = None;
                (Reclaimed::Short, "failed", 0)
            }
        };
        if let Some(m) = metrics {
            let (ns, pod) = (self.reg.namespace.as_str(), self.reg.pod.as_str());
            m.bytes.with_label_values(&[ns, pod, why]).inc_by(got);
            m.seconds
                .with_label_values(&[ns, pod, why])
                .inc_by(spent.as_secs_f64());
            m.passes.with_label_values(&[ns, pod, why, result]).inc();
        }
        (outcome, got)
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
