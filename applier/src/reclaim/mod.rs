//! Async reclaim where the kernel lacks it: the Alibaba kernel's memcg background reclaim
//! (`memory.wmark_ratio`), emulated with mainline's `memory.reclaim` (Linux 5.19+).
//!
//! The pod pass ([`crate::apply`]) finds a container's `memory.wmark_ratio` unsupported and
//! registers the container here with the annotation's ratio and scale factor; one worker
//! thread ([`worker`]) reads each registered container's `memory.current` every tick and,
//! above `wmark_high` ([`watermarks`]), asks the kernel to reclaim down to `wmark_low`
//! ([`pace`]). `memory.reclaim` reclaims in the writer's context, so the worker is its own
//! thread: the pod watch, the resync and the NRI answers never wait for it. It is bounded per
//! write (a chunk), per second (a CPU budget) and per container (back-off when the kernel
//! finds nothing to take). Nothing is left behind on exit: a reclaim changes no setting.
//!
//! Detected once at start (cgroup v2 and `memory.reclaim` in `kubepods`); while no container
//! asks for it the worker sleeps on a condition variable and costs nothing.

mod args;
pub mod metrics;
pub mod pace;
pub mod watermarks;
mod worker;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

pub use args::{ReclaimArgs, Settings, SettingsError};
pub use metrics::ReclaimMetrics;
pub use worker::Worker;

use crate::cgroup::layout::Layout;
use crate::cgroup::{CgroupVersion, Controller};

/// What emulates the knobs, as the Event and the metrics name it.
pub const EMULATED_BY: &str = "memory.reclaim";
/// The annotation's knobs the emulation realizes.
pub const EMULATED_KNOBS: [&str; 2] = [
    koord_api::knobs::MEMORY_WMARK_RATIO,
    koord_api::knobs::MEMORY_WMARK_SCALE_FACTOR,
];

/// One container's request, from the pod pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub namespace: String,
    pub pod: String,
    /// The container's memory cgroup directory, from the layout (never from the annotation).
    pub dir: Arc<Path>,
    pub ratio: i64,
    pub scale_factor: i64,
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
    metrics: Option<ReclaimMetrics>,
}

impl AsyncReclaim {
    /// The emulation on this node, if the settings ask for it and the kernel can do it.
    pub fn detect(
        layout: &Layout,
        settings: Settings,
        metrics: Option<ReclaimMetrics>,
    ) -> Option<Arc<Self>> {
        if !settings.enabled {
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
        Some(Arc::new(Self {
            settings,
            targets: Mutex::default(),
            changed: Condvar::new(),
            metrics,
        }))
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
                for knob in EMULATED_KNOBS {
                    m.emulated.with_label_values(&[knob, EMULATED_BY]).set(1);
                }
            }
            t.insert(key, reg);
            self.changed.notify_all();
        }
    }

    /// Stops the emulation for one container (its ratio went to 0).
    pub fn unset(&self, uid: &str, container: &str) {
        let key = Key {
            uid: uid.to_owned(),
            container: container.to_owned(),
        };
        if let Some(reg) = self.lock().remove(&key) {
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

    /// The registered containers now.
    fn snapshot(&self) -> Vec<(Key, Registration)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
