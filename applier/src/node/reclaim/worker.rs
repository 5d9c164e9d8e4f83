//! The reclaim worker: one thread, one tick per `--async-reclaim-interval-ms`. Each tick: one
//! `pread` of `memory.current` per registered container and a `memory.reclaim` write where
//! [`Pace::step`] says so (async reclaim); then, when a BE container is registered, one read of
//! `/proc/zoneinfo` and, below the floor [`BeFirst::step`] sets, `memory.reclaim` writes to the
//! BE containers, the largest first ([`share`]), then the throttle's step for each
//! ([`throttle::decide`]). The limits (`memory.max`, `memory.high`) are re-read once a second,
//! so an in-place resize moves the watermarks within a second; a throttled container's
//! `memory.high` then too, so a value written behind the worker's back (systemd re-applying
//! its own) becomes the value to restore and the throttle is written again.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use koord_translator::cgroup::readback::Expect;

use super::be_first::{BeFirst, share};
use super::pace::{Backoff, Bounds, Budget, Pace, Reclaimed, Step, slices};
use super::throttle::{self, Decision, Pressure, Seen};
use super::watermarks::Watermarks;
use super::zoneinfo::parse_zoneinfo;
use super::{AsyncReclaim, Key, Registration, THROTTLE_OWNER, high_key};
use crate::node::reclaim::metrics::ReclaimMetrics;
use crate::node::shared::limit::{limit_bytes, parse_limit};
use crate::node::writer::{NodeWriter, Want};

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
            bounds: Bounds {
                write_slice: shared.settings.write_slice,
                ..Bounds::default()
            },
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
        self.be_first_pass(now, read_limits);
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
        let gone: Vec<Key> = self
            .tracked
            .keys()
            .filter(|k| !snapshot.iter().any(|(s, _)| s == *k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(t) = self.tracked.remove(&key)
                && t.throttle.is_some()
            {
                // Left the emulation (deleted, or no longer BE): its value goes back.
                self.release(&key, &t.reg.dir, "the container left the emulation");
            }
        }
        for (key, reg) in snapshot {
            match self.tracked.get_mut(&key) {
                Some(t) if t.reg == reg => {}
                // New values for the same cgroup: a throttle in force stays.
                Some(t) if t.reg.dir == reg.dir => {
                    let throttle = t.throttle.take();
                    *t = Tracked::new(reg);
                    t.throttle = throttle;
                }
                // A new cgroup (the container restarted): the old one's throttle goes with it.
                Some(t) => {
                    let old = std::mem::replace(t, Tracked::new(reg));
                    if old.throttle.is_some() {
                        self.release(&key, &old.reg.dir, "the container restarted");
                    }
                }
                // First seen by this process (a crashed applier's throttles went back in the
                // node writer's start sweep).
                None => {
                    self.tracked.insert(key, Tracked::new(reg));
                }
            }
        }
    }

    /// Puts the value before back and tells the registry.
    fn release(&self, key: &Key, dir: &Arc<Path>, why: &str) {
        match self.shared.release(dir) {
            Ok(()) => tracing::debug!(dir = %dir.display(), why, "BE throttle released"),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not release the BE throttle")
            }
        }
        let mut held = self.shared.lock_throttled();
        held.remove(key);
        if let Some(m) = &self.shared.metrics {
            m.throttled
                .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
        }
    }

    /// Below the floor: the BE containers' share of the deficit, the largest first; then the
    /// throttle.
    fn be_first_pass(&mut self, now: Duration, read_limits: bool) {
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
        if pages > 0 {
            self.reclaim_be(now, pages);
        }
        if self.shared.settings.throttle {
            let pressure = self.be_first.pressure(&node, adj);
            self.throttle_pass(pressure, read_limits);
        }
    }

    fn reclaim_be(&mut self, now: Duration, pages: u64) {
        let metrics = self.shared.metrics.as_ref();
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
        // Under the node's floor each ask is written at once: the node's free memory is what
        // is short, and slices with sleeps between them would give it back later. (The slices
        // spare a container's own tasks the wait; a BE container's reads are not protected.)
        let at_once = Bounds {
            write_slice: u64::MAX,
            ..self.bounds
        };
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
            let (outcome, got) = t.reclaim(ask, &at_once, &mut self.budget, metrics, "be-first");
            t.be_backoff.record(now, outcome, &self.bounds);
            freed += got;
        }
        self.be_first.reclaimed(freed / PAGE);
    }

    /// The throttle's step for each BE container ([`throttle::decide`]): only containers
    /// already held are read when the node is not under the throttle point.
    fn throttle_pass(&mut self, pressure: Pressure, read_limits: bool) {
        // On exit `release_all` has put every value back: nothing more is written.
        if self.shared.closing.load(Ordering::Acquire) {
            return;
        }
        let mut released = Vec::new();
        for (key, t) in &mut self.tracked {
            if t.reg.min_adj <= 0 || t.unrecordable {
                continue;
            }
            if t.throttle.is_none() && pressure != Pressure::Under {
                continue;
            }
            if read_limits && t.throttle.is_some() {
                t.check_throttle();
            }
            let Some(usage) = t.usage() else { continue };
            let seen = match t.throttle {
                Some(th) => Seen {
                    usage,
                    min: th.min,
                    prior: th.prior,
                },
                None => match t.limits_now() {
                    Some((prior, min)) => Seen { usage, min, prior },
                    None => continue,
                },
            };
            let decision = throttle::decide(t.throttle.map(|th| th.value), pressure, seen);
            match decision {
                Decision::Leave => {}
                Decision::Release => released.push((key.clone(), t.reg.dir.clone())),
                Decision::Set(v) => {
                    let starting = t.throttle.is_none();
                    if starting {
                        t.start_throttle(seen, key, self.shared);
                    }
                    if !t.write_throttle(v, &self.shared.writer) {
                        t.throttle = None;
                        if starting {
                            released.push((key.clone(), t.reg.dir.clone()));
                        }
                    }
                }
            }
        }
        for (key, dir) in released {
            if let Some(t) = self.tracked.get_mut(&key) {
                t.throttle = None;
            }
            self.release(&key, &dir, "the node's pressure went");
        }
    }
}

/// A container's throttle in force.
#[derive(Debug, Clone, Copy)]
struct Throttle {
    /// What `memory.high` holds now (handed to the node writer by the worker).
    value: u64,
    /// What it held before (`u64::MAX`: `max`), recorded on the cgroup.
    prior: u64,
    /// The container's `memory.min` when the throttle began.
    min: u64,
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
    throttle: Option<Throttle>,
    /// Its cgroup takes no record (no user xattrs): reclaimed first, never throttled.
    unrecordable: bool,
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
            throttle: None,
            unrecordable: false,
        }
    }

    /// `memory.high` (what a throttle would restore) and `memory.min` now.
    fn limits_now(&self) -> Option<(u64, u64)> {
        let read = |file: &str| std::fs::read_to_string(self.reg.dir.join(file)).ok();
        let prior = limit_bytes(&read("memory.high")?)?;
        let min = read("memory.min")
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        Some((prior, min))
    }

    /// Tells the registry the pod pass must leave `memory.high` alone; the node writer records
    /// the value before on the cgroup with the first write.
    fn start_throttle(&mut self, seen: Seen, key: &Key, shared: &AsyncReclaim) {
        self.throttle = Some(Throttle {
            value: seen.prior,
            prior: seen.prior,
            min: seen.min,
        });
        let mut held = shared.lock_throttled();
        held.insert(key.clone(), self.reg.dir.clone());
        if let Some(m) = &shared.metrics {
            m.throttles
                .with_label_values(&[&self.reg.namespace, &self.reg.pod])
                .inc();
            m.throttled
                .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
        }
    }

    /// Hands the throttle's value to the node writer, which writes it if the file differs.
    /// False when the writer could not record the value before (no user xattrs): a throttle
    /// a crash could leave behind is not set, and never again for this container.
    fn write_throttle(&mut self, value: u64, writer: &NodeWriter) -> bool {
        let want = Want {
            text: value.to_string(),
            expect: Expect::Bytes(i64::try_from(value).unwrap_or(i64::MAX)),
            or_higher: false,
        };
        let r = writer.hold(THROTTLE_OWNER, high_key(self.reg.dir.clone()), want);
        if r.unrecorded > 0 {
            tracing::warn!(dir = %self.reg.dir.display(), "cannot record memory.high on the cgroup (user xattrs): this container is reclaimed first under node pressure, not throttled");
            self.unrecordable = true;
            return false;
        }
        if r.errors > 0 || r.refused > 0 {
            tracing::debug!(dir = %self.reg.dir.display(), "memory.high write failed");
        } else if let Some(th) = self.throttle.as_mut() {
            th.value = value;
        }
        true
    }

    /// Once a second while throttled: a value someone else wrote (systemd re-applying its
    /// own, the kubelet resizing) is the value to restore from now on (the writer records it
    /// at its next write); the throttle is then written again by the next step.
    fn check_throttle(&mut self) {
        let Some(th) = self.throttle.as_mut() else {
            return;
        };
        let now = std::fs::read_to_string(self.reg.dir.join("memory.high"))
            .ok()
            .and_then(|t| limit_bytes(&t));
        if let Some(now) = now.filter(|v| *v != th.value) {
            th.prior = now;
            th.value = now;
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
        let (outcome, _) = self.reclaim(bytes, bounds, budget, metrics, "wmark");
        let after = self.usage().unwrap_or(current);
        self.pace.done(now, outcome, after, bounds);
    }

    /// One reclaim of `bytes` (`memory.reclaim` written in slices, [`Bounds::write_slice`]),
    /// its CPU time spent from `budget`, counted under `why`; how it ended and the bytes taken
    /// (all of them when the kernel says so, else the drop of `memory.current`).
    fn reclaim(
        &mut self,
        bytes: u64,
        bounds: &Bounds,
        budget: &mut Budget,
        metrics: Option<&ReclaimMetrics>,
        why: &str,
    ) -> (Reclaimed, u64) {
        let before = self.last_usage.unwrap_or(0);
        let cpu0 = thread_cpu();
        let (wrote, spent) = self.ask(bytes, bounds);
        budget.spend(thread_cpu().saturating_sub(cpu0));
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
        // Throttled: the watermarks stay those of the value before (the throttle's own would
        // have async reclaim chase it down).
        let high = match self.throttle {
            Some(th) => (th.prior != u64::MAX).then_some(th.prior),
            None => read("memory.high")?,
        };
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

    /// Writes `memory.reclaim` slice by slice, asleep between two; stops at the first error
    /// (`EAGAIN`: nothing more to take). Returns the result and the time spent in the writes
    /// (the sleeps left out).
    fn ask(&mut self, bytes: u64, bounds: &Bounds) -> (std::io::Result<()>, Duration) {
        let f = match &self.reclaim {
            Some(f) => f,
            None => match std::fs::OpenOptions::new()
                .write(true)
                .open(self.reg.dir.join("memory.reclaim"))
            {
                Ok(f) => self.reclaim.insert(f),
                Err(e) => return (Err(e), Duration::ZERO),
            },
        };
        let mut spent = Duration::ZERO;
        for (i, slice) in slices(bytes, bounds.write_slice).enumerate() {
            if i > 0 {
                std::thread::sleep(bounds.slice_gap);
            }
            let t0 = Instant::now();
            let wrote = f.write_at(slice.to_string().as_bytes(), 0);
            spent += t0.elapsed();
            if let Err(e) = wrote {
                return (Err(e), spent);
            }
        }
        (Ok(()), spent)
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
