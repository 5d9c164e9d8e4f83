//! The Alibaba kernel's memcg background reclaim (`memory.wmark_ratio`) and its BE-first
//! minimum watermark (`memory.wmark_min_adj`), emulated with mainline's `memory.reclaim`
//! (Linux 5.19+) where the kernel lacks them.
//!
//! The pod pass (`koord_translator::pod::apply`, through its `ContainerHooks`, implemented in
//! `hooks`) finds a container's `memory.wmark_ratio` unsupported and registers the container
//! here with the annotation's ratio and scale factor; one worker
//! thread ([`worker`]) reads each registered container's `memory.current` every tick and,
//! above `wmark_high` ([`watermarks`]), asks the kernel to reclaim down to `wmark_low`
//! ([`pace`]); and when the node's free memory nears the kernel's watermarks it reclaims from
//! the containers with a positive `memory.wmark_min_adj` (BE) first ([`be_first`],
//! [`zoneinfo`]) and holds their growth with `memory.high` while the pressure lasts
//! ([`throttle`]; written and put back by the node writer, which also keeps the value before
//! on the cgroup for a successor after a crash). `memory.reclaim` reclaims in the context
//! of the thread that writes it, so the worker is its own thread: the pod watch, the resync and the
//! NRI answers never wait for it. It is bounded per write (a chunk), per second (a CPU budget)
//! and per container (back-off when the kernel finds nothing to take). Nothing is left behind:
//! a reclaim changes no setting, a throttle is released when the pressure goes, when the
//! container leaves the emulation and on exit ([`AsyncReclaim::release_all`]), and one left by
//! a crash is released by the node writer's sweep of the tree at the next start.
//!
//! Detected once at start (cgroup v2 and `memory.reclaim` in `kubepods`) by the node feature
//! of `run` ([`AsyncReclaimFeature`]); while no container asks for it the worker sleeps on a
//! condition variable and costs nothing.

pub mod be_first;
mod feature;
mod hooks;
pub mod metrics;
pub mod pace;
mod settings;
pub mod throttle;
pub mod watermarks;
mod worker;
pub mod zoneinfo;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupVersion, Controller};

use crate::node::writer::{NodeWriter, Owner};

pub use feature::AsyncReclaimFeature;
pub use metrics::ReclaimMetrics;
pub use settings::Settings;
pub use worker::Worker;

/// What emulates the knobs, as the Event and the metrics name it.
pub const EMULATED_BY: &str = "memory.reclaim";
/// The BE throttle, as the node writer names the owner of the `memory.high` it holds.
const THROTTLE_OWNER: Owner = "BE throttle";
/// The knobs async reclaim realizes.
pub const ASYNC_KNOBS: [&str; 2] = [
    koord_api::knobs::MEMORY_WMARK_RATIO,
    koord_api::knobs::MEMORY_WMARK_SCALE_FACTOR,
];
/// The knob BE-first realizes (positive values by reclaiming and throttling those containers
/// first, negative ones by never choosing them).
pub const BE_FIRST_KNOB: &str = koord_api::knobs::MEMORY_WMARK_MIN_ADJ;
/// What emulates BE-first when it throttles too.
pub const THROTTLED_BY: &str = "memory.reclaim+memory.high";

/// One container's request, from the pod pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub namespace: String,
    pub pod: String,
    /// The container's memory cgroup directory, from the layout (never from the annotation).
    pub dir: Arc<Path>,
    /// `memory.wmark_ratio`, 0 when the kernel has it or async reclaim is off.
    pub ratio: i64,
    pub scale_factor: i64,
    /// `memory.wmark_min_adj` when positive (BE) and emulated, else 0.
    pub min_adj: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    uid: String,
    container: String,
}

/// The registry the pod pass fills and the worker reads.
pub struct AsyncReclaim {
    settings: Settings,
    targets: Mutex<BTreeMap<Key, Registration>>,
    changed: Condvar,
    /// Bumped by every change of `targets`: the worker copies them only when it moved.
    generation: AtomicU64,
    /// Containers whose `memory.high` the BE throttle holds now (the pod pass leaves it to the
    /// worker), with their directories.
    throttled: Mutex<BTreeMap<Key, Arc<Path>>>,
    /// Set on exit: the throttles are released and no new one is set.
    closing: AtomicBool,
    /// Writes the throttles and puts the values before back.
    writer: Arc<NodeWriter>,
    metrics: Option<ReclaimMetrics>,
}

/// A container's `memory.high`, as the node writer names it.
fn high_key(dir: Arc<Path>) -> crate::node::writer::Key {
    crate::node::writer::Key {
        dir,
        file: "memory.high",
    }
}

impl AsyncReclaim {
    /// The emulation on this node, if the settings ask for it and the kernel can do it.
    pub fn detect(
        layout: &Layout,
        settings: Settings,
        writer: Arc<NodeWriter>,
        metrics: Option<ReclaimMetrics>,
    ) -> Option<Arc<Self>> {
        if !settings.any() {
            return None;
        }
        let has_reclaim = layout.version == CgroupVersion::V2
            && layout
                .dir(&layout.kubepods_dir(), Controller::Memory)
                .is_ok_and(|d| d.join("memory.reclaim").exists());
        if !has_reclaim {
            tracing::info!(
                "no memory.reclaim on this node (cgroup v1, or a kernel before 5.19): memory.wmark_ratio stays unsupported where the kernel lacks it"
            );
            return None;
        }
        Some(Arc::new(Self::new(settings, writer, metrics)))
    }

    fn new(settings: Settings, writer: Arc<NodeWriter>, metrics: Option<ReclaimMetrics>) -> Self {
        Self {
            settings,
            targets: Mutex::default(),
            changed: Condvar::new(),
            generation: AtomicU64::new(0),
            throttled: Mutex::default(),
            closing: AtomicBool::new(false),
            writer,
            metrics,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Starts the worker thread.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("async-reclaim".to_owned())
            .spawn(move || worker::run(&me))
            .map(|_| ())
    }

    /// Keeps `container` of pod `uid` below its `wmark_high` from now on (or with new values).
    pub fn set(&self, uid: &str, container: &str, reg: Registration) {
        let key = Key {
            uid: uid.to_owned(),
            container: container.to_owned(),
        };
        let mut t = self.lock();
        if t.get(&key) != Some(&reg) {
            if let Some(m) = &self.metrics {
                if reg.ratio > 0 {
                    for knob in ASYNC_KNOBS {
                        m.emulated.with_label_values(&[knob, EMULATED_BY]).set(1);
                    }
                }
                if reg.min_adj > 0 {
                    m.emulated
                        .with_label_values(&[BE_FIRST_KNOB, self.be_first_by()])
                        .set(1);
                }
            }
            t.insert(key, reg);
            self.generation.fetch_add(1, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// Stops the emulation for one container (its ratio went to 0).
    pub fn unset(&self, uid: &str, container: &str) {
        let key = Key {
            uid: uid.to_owned(),
            container: container.to_owned(),
        };
        // The guard must go before `forget_series` locks again (a std Mutex is not reentrant).
        let removed = self.lock().remove(&key);
        if let Some(reg) = removed {
            self.generation.fetch_add(1, Ordering::Release);
            self.forget_series(uid, &reg);
        }
    }

    /// Drops every container of a deleted pod.
    pub fn forget(&self, uid: &str) {
        let mut t = self.lock();
        let gone: Vec<Key> = t.keys().filter(|k| k.uid == uid).cloned().collect();
        let mut last = None;
        for k in gone {
            last = t.remove(&k);
        }
        drop(t);
        if let Some(reg) = last {
            self.generation.fetch_add(1, Ordering::Release);
            self.forget_series(uid, &reg);
        }
    }

    /// A pod's series go when none of its containers is left.
    fn forget_series(&self, uid: &str, reg: &Registration) {
        let still = self.lock().keys().any(|k| k.uid == uid);
        if let (false, Some(m)) = (still, &self.metrics) {
            m.forget(&reg.namespace, &reg.pod);
        }
    }

    /// What realizes `memory.wmark_min_adj` here, as the Event and the metrics name it.
    pub fn be_first_by(&self) -> &'static str {
        if self.settings.throttle {
            THROTTLED_BY
        } else {
            EMULATED_BY
        }
    }

    /// Whether the BE throttle holds this container's `memory.high` now: the pod pass leaves
    /// the file to the worker until it is released.
    pub fn holds_high(&self, uid: &str, container: &str) -> bool {
        let key = Key {
            uid: uid.to_owned(),
            container: container.to_owned(),
        };
        self.lock_throttled().contains_key(&key)
    }

    /// Releases every throttle (the values before put back) and sets no new one: on exit.
    pub fn release_all(&self) {
        self.closing.store(true, Ordering::Release);
        let held = std::mem::take(&mut *self.lock_throttled());
        for dir in held.values() {
            match self.release(dir) {
                Ok(()) => tracing::info!(dir = %dir.display(), "BE throttle released on exit"),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not release the BE throttle on exit")
                }
            }
        }
        if let Some(m) = &self.metrics {
            m.throttled.set(0);
        }
    }

    /// The throttle's `memory.high` back to the value before, through the writer (a value
    /// not put back stays recorded: the next start puts it back).
    fn release(&self, dir: &Arc<Path>) -> std::io::Result<()> {
        let r = self.writer.release(THROTTLE_OWNER, high_key(dir.clone()));
        if r.errors > 0 {
            return Err(std::io::Error::other("memory.high not put back"));
        }
        Ok(())
    }

    fn lock_throttled(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Arc<Path>>> {
        self.throttled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many containers are under emulation.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Registration>> {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a container is registered.
    fn wait_for_targets(&self) {
        let mut t = self.lock();
        while t.is_empty() {
            t = self.changed.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The registry's version: changes whenever a container is set, unset or forgotten.
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The registered containers now.
    fn snapshot(&self) -> Vec<(Key, Registration)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(pod: &str) -> Registration {
        Registration {
            namespace: "ns".into(),
            pod: pod.into(),
            dir: Path::new("/sys/fs/cgroup/kubepods/x").into(),
            ratio: 95,
            scale_factor: 20,
            min_adj: 0,
        }
    }

    fn registry() -> AsyncReclaim {
        AsyncReclaim::new(
            Settings::default(),
            Arc::default(),
            Some(ReclaimMetrics::register(&prometheus::Registry::new()).expect("metrics")),
        )
    }

    /// Each call in a thread of its own, bounded in time: a call that locks the registry twice
    /// would hang the test rather than fail it.
    fn within_a_second(r: &Arc<AsyncReclaim>, f: fn(&AsyncReclaim)) {
        let (tx, rx) = std::sync::mpsc::channel();
        let r = r.clone();
        std::thread::spawn(move || {
            f(&r);
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(1))
            .expect("the call returned (no lock taken twice)");
    }

    #[test]
    fn set_unset_and_forget_keep_the_registry_and_return() {
        let r = Arc::new(registry());
        within_a_second(&r, |r| {
            r.set("u1", "a", reg("p1"));
            r.set("u1", "b", reg("p1"));
            r.set("u2", "a", reg("p2"));
        });
        assert_eq!(r.len(), 3);
        // A ratio gone to 0 for a registered container (a ConfigMap flip): taken off.
        within_a_second(&r, |r| r.unset("u1", "a"));
        assert_eq!(r.len(), 2);
        within_a_second(&r, |r| r.unset("u1", "nothing-here"));
        within_a_second(&r, |r| r.forget("u1"));
        assert_eq!(r.len(), 1);
        within_a_second(&r, |r| r.unset("u2", "a"));
        assert!(r.is_empty());
    }
}
