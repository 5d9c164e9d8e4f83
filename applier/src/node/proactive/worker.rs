//! The loop's state over the node's opted-in containers, and the thread that runs it.
//!
//! [`ProactiveLoop::scan`] takes the pods in (every [`super::Settings::scan_period`], from the
//! watch's pod cache: no second watch) and [`ProactiveLoop::tick`] runs the controller for the
//! containers whose interval is due. The thread wakes once per [`TICK`]; parameters come in
//! whole seconds (1..600), so a second is the finest cadence any pod can ask for.
//!
//! Why a scan every few seconds rather than on each watch change: reading the cache takes its
//! read lock for the time of cloning the pods' `Arc`s, and a pod whose annotation, containers
//! and requests are what they were at the last scan costs a comparison and nothing more (no
//! JSON parsed, no Event, no path built); the loop needs no hook in the watch, and a change
//! reaches it within the scan period, well under any interval worth running at.
//!
//! Bounded CPU: a tick costs two `pread`s per due container (O(opted-in containers), no
//! allocation on the steady path) plus its reclaim writes, which stop once the tick has spent
//! `--proactive-reclaim-write-budget-ms` (50 ms by default: at most 5% of a core, as ticks are
//! a second apart). A container left over keeps its due time and is first at the next tick.
//! The thread is a std thread of its own: `memory.reclaim` reclaims in the writer's context,
//! and the runtime's tasks (the watch, the resync, the NRI answers) never wait for it; it
//! holds no lock they take, the cache's read lock aside, for the clone.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_api::ProactiveReclaimParams;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use koord_translator::cgroup::layout::Layout;
use koord_translator::pod::event::PodEvent;
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::Settings;
use super::cgroup::{ContainerFiles, End, Lack, ReclaimTarget as _, reclaim_above_floor};
use super::controller::{Action, LoopState, Sample, next_step};
use super::metrics::{BackOff, ProactiveMetrics};
use super::select::{OptIn, Verdict, verdict};
use crate::event_sink::SinkMsg;

/// The thread's cadence.
pub const TICK: Duration = Duration::from_secs(1);

/// What a pod's verdict was made from (its annotation, QoS class and containers), hashed: a
/// pod whose key has not moved is not looked at again, and the loop keeps 8 bytes per pod
/// rather than a copy of its annotation.
fn pod_key(pod: &PodSpecView) -> u64 {
    let mut h = DefaultHasher::new();
    pod.resolved_qos.hash(&mut h);
    pod.kube_qos.hash(&mut h);
    pod.containers.hash(&mut h);
    h.finish()
}

/// One container in the loop.
#[derive(Debug)]
struct Looped {
    namespace: String,
    pod: String,
    container: String,
    floor: u64,
    params: ProactiveReclaimParams,
    files: ContainerFiles,
    state: LoopState,
    /// When the last sample was read (the loop's clock).
    sampled_at: Option<Duration>,
    /// When its next interval is due.
    due: Duration,
}

impl Looped {
    fn interval(&self) -> Duration {
        Duration::from_secs(
            u64::try_from(self.params.interval_seconds)
                .unwrap_or(1)
                .max(1),
        )
    }

    fn labels(&self) -> [&str; 3] {
        [&self.namespace, &self.pod, &self.container]
    }
}

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Containers whose interval was due and were read.
    pub sampled: usize,
    /// Bytes the kernel reclaimed for this tick's writes.
    pub reclaimed: u64,
    /// Containers left for the next tick: the write budget was spent.
    pub deferred: usize,
}

/// The loop over this node's opted-in containers.
pub struct ProactiveLoop {
    layout: Layout,
    support: Result<(), Lack>,
    settings: Settings,
    metrics: Option<ProactiveMetrics>,
    pods: HashMap<String, u64>,
    /// Each pod's `metadata.resourceVersion` at its last scan: an unchanged pod is not even
    /// viewed again (no annotation copied, nothing allocated for it).
    versions: HashMap<String, String>,
    looped: BTreeMap<(String, String), Looped>,
}

impl ProactiveLoop {
    /// `support` is what [`super::cgroup::node_support`] found at start.
    pub fn new(
        layout: Layout,
        support: Result<(), Lack>,
        settings: Settings,
        metrics: Option<ProactiveMetrics>,
    ) -> Self {
        Self {
            layout,
            support,
            settings,
            metrics,
            pods: HashMap::new(),
            versions: HashMap::new(),
            looped: BTreeMap::new(),
        }
    }

    /// Containers in the loop now.
    pub fn len(&self) -> usize {
        self.looped.len()
    }

    pub fn is_empty(&self) -> bool {
        self.looped.is_empty()
    }

    /// Takes in this node's pods at `now` (the loop's clock): new and changed pods get their
    /// verdict (and, refused or unsupported, their one Event, returned), gone pods leave the
    /// loop with their series.
    pub fn scan(&mut self, pods: &[PodSpecView], now: Duration) -> Vec<PodEvent> {
        self.scan_views(pods, HashSet::new(), now)
    }

    /// [`Self::scan`] over the watch's cache: a pod whose `resourceVersion` is the one of its
    /// last scan is kept as it is without being viewed again.
    pub fn scan_store(&mut self, store: &Store<Pod>, now: Duration) -> Vec<PodEvent> {
        let state = store.state();
        let mut views = Vec::new();
        let mut unchanged = HashSet::new();
        // The versions of the pods viewed now, kept once their verdict is made.
        let mut viewed = Vec::new();
        for p in state.iter().filter(|p| phase::is_active(p)) {
            let (uid, rv) = (&p.metadata.uid, &p.metadata.resource_version);
            if let (Some(uid), Some(rv)) = (uid, rv) {
                if self.versions.get(uid) == Some(rv) {
                    unchanged.insert(uid.as_str());
                    continue;
                }
                viewed.push((uid, rv));
            }
            if let Ok(view) = PodSpecView::from_pod(p) {
                views.push(view);
            }
        }
        let events = self.scan_views(&views, unchanged, now);
        for (uid, rv) in viewed {
            if self.pods.contains_key(uid) {
                self.versions.insert(uid.clone(), rv.clone());
            }
        }
        self.versions.retain(|uid, _| self.pods.contains_key(uid));
        events
    }

    fn scan_views<'a>(
        &mut self,
        pods: &'a [PodSpecView],
        mut present: HashSet<&'a str>,
        now: Duration,
    ) -> Vec<PodEvent> {
        let mut events = Vec::new();
        present.reserve(pods.len());
        for pod in pods {
            present.insert(pod.uid.as_str());
            let key = pod_key(pod);
            if self.pods.get(&pod.uid) == Some(&key) {
                continue;
            }
            let v = verdict(pod, &self.layout, self.support);
            if let (Some(reason), Some(m)) = (v.refusal_reason(), &self.metrics) {
                m.refused.with_label_values(&[reason]).inc();
            }
            if let Some(ev) = v.event(pod) {
                tracing::info!(namespace = %pod.namespace, pod = %pod.name, reason = ev.reason, message = %ev.message, "proactive reclaim not run for the pod");
                events.push(ev);
            }
            match v {
                Verdict::Loop { params, containers } => {
                    self.set_containers(pod, params, containers, now);
                }
                _ => self.drop_containers(|uid| uid == pod.uid),
            }
            self.pods.insert(pod.uid.clone(), key);
        }
        self.pods.retain(|uid, _| present.contains(uid.as_str()));
        self.drop_containers(|uid| !present.contains(uid));
        if let Some(m) = &self.metrics {
            m.containers
                .set(i64::try_from(self.looped.len()).unwrap_or(i64::MAX));
        }
        events
    }

    /// The pod's containers in the loop become `wanted`: a container whose cgroup is the same
    /// keeps its state (a new floor or new parameters apply from its next interval).
    fn set_containers(
        &mut self,
        pod: &PodSpecView,
        params: ProactiveReclaimParams,
        wanted: Vec<OptIn>,
        now: Duration,
    ) {
        let names: HashSet<&str> = wanted.iter().map(|w| w.container.as_str()).collect();
        self.drop_containers_of(&pod.uid, |name| !names.contains(name));
        for w in wanted {
            let key = (pod.uid.clone(), w.container.clone());
            let same_cgroup = self
                .looped
                .get(&key)
                .is_some_and(|l| l.files.dir() == &*w.dir);
            if same_cgroup {
                if let Some(l) = self.looped.get_mut(&key) {
                    l.floor = w.floor;
                    l.params = params;
                }
            } else {
                // New, or restarted (another cgroup): measured from its first sample.
                self.looped.insert(
                    key,
                    Looped {
                        namespace: pod.namespace.clone(),
                        pod: pod.name.clone(),
                        container: w.container,
                        floor: w.floor,
                        params,
                        files: ContainerFiles::new(w.dir),
                        state: LoopState::default(),
                        sampled_at: None,
                        due: now,
                    },
                );
            }
        }
        if let Some(m) = &self.metrics {
            for ((uid, _), l) in &self.looped {
                if uid == &pod.uid {
                    let [ns, name, container] = l.labels();
                    m.join(
                        ns,
                        name,
                        container,
                        micros_to_seconds(u64::try_from(l.params.stall_target_micros).unwrap_or(0)),
                    );
                }
            }
        }
    }

    fn drop_containers_of(&mut self, uid: &str, gone: impl Fn(&str) -> bool) {
        let keys: Vec<(String, String)> = self
            .looped
            .keys()
            .filter(|(u, name)| u == uid && gone(name))
            .cloned()
            .collect();
        self.remove(keys);
    }

    fn drop_containers(&mut self, gone: impl Fn(&str) -> bool) {
        let keys: Vec<(String, String)> = self
            .looped
            .keys()
            .filter(|(uid, _)| gone(uid))
            .cloned()
            .collect();
        self.remove(keys);
    }

    fn remove(&mut self, keys: Vec<(String, String)>) {
        for key in keys {
            if let (Some(l), Some(m)) = (self.looped.remove(&key), &self.metrics) {
                m.forget(&l.namespace, &l.pod, &l.container);
            }
        }
    }

    /// Runs the controller for every container due at `now` (the loop's clock), the longest
    /// due first; the reclaim writes stop once the tick has spent the write budget.
    pub fn tick(&mut self, now: Duration) -> TickReport {
        let started = Instant::now();
        let deadline = started + self.settings.write_budget;
        let Self {
            looped,
            metrics,
            settings,
            ..
        } = self;
        // References, not keys: a tick allocates one vector and no string.
        let mut due: Vec<&mut Looped> = looped.values_mut().filter(|l| l.due <= now).collect();
        due.sort_by_key(|l| l.due);
        let mut report = TickReport::default();
        let metrics = metrics.as_ref();
        for l in due {
            if Instant::now() >= deadline {
                // Not sampled: its interval is measured whole at the next tick.
                report.deferred += 1;
                if let Some(m) = metrics {
                    m.over_budget.inc();
                }
                continue;
            }
            report.sampled += 1;
            report.reclaimed += one_interval(l, now, settings, deadline, metrics);
        }
        report
    }
}

/// One container's interval: sample, decide, act. Returns the bytes reclaimed.
fn one_interval(
    l: &mut Looped,
    now: Duration,
    settings: &Settings,
    deadline: Instant,
    metrics: Option<&ProactiveMetrics>,
) -> u64 {
    let interval = l.interval();
    l.due = now + interval;
    let (total, current) = match (l.files.pressure_total(), l.files.current()) {
        (Ok(t), Ok(c)) => (t, c),
        (Err(e), _) | (_, Err(e)) => {
            // The cgroup went (the scan takes the container out) or PSI is off for it.
            tracing::debug!(dir = %l.files.dir().display(), error = %e, "proactive reclaim: cannot read the container's memory.pressure or memory.current");
            return 0;
        }
    };
    let elapsed = l.sampled_at.map_or(interval, |t| now.saturating_sub(t));
    l.sampled_at = Some(now);
    let sample = Sample {
        pressure_total_micros: total,
        current_bytes: current,
        // Unreadable: the stall alone decides this interval.
        refault_pages: l.files.refaults().ok(),
        elapsed,
    };
    let (decision, next) = next_step(&l.state, sample, &l.params, l.floor);
    l.state = next;
    if let (Some(m), Some(stall)) = (metrics, decision.stall_micros) {
        let [ns, pod, c] = l.labels();
        m.stall(ns, pod, c, micros_to_seconds(stall));
    }
    let backoff = |l: &Looped, why: BackOff| {
        if let Some(m) = metrics {
            let [ns, pod, c] = l.labels();
            m.backoff(ns, pod, c, why);
        }
    };
    let bytes = match decision.action {
        Action::BackOff(_) => {
            backoff(l, BackOff::Stall);
            return 0;
        }
        Action::Refaulted(_) => {
            backoff(l, BackOff::Refault);
            return 0;
        }
        Action::Reclaim(bytes) => bytes,
        Action::Record | Action::AtFloor | Action::Wait => return 0,
    };
    let r = reclaim_above_floor(&mut l.files, bytes, l.floor, settings.slices, deadline);
    l.state = l.state.after_reclaim(r.bytes);
    match r.end {
        End::Short => {
            backoff(l, BackOff::Short);
            l.state = l.state.after_short();
        }
        End::OutOfTime => {
            if let Some(m) = metrics {
                m.over_budget.inc();
            }
        }
        End::Failed => {
            tracing::debug!(dir = %l.files.dir().display(), "proactive reclaim: memory.reclaim failed");
        }
        End::Full | End::AtFloor => {}
    }
    if let Some(m) = metrics {
        let [ns, pod, c] = l.labels();
        m.reclaimed(ns, pod, c, r.bytes);
    }
    r.bytes
}

fn micros_to_seconds(micros: u64) -> f64 {
    Duration::from_micros(micros).as_secs_f64()
}

/// The thread's body: scans the cache every scan period, ticks every [`TICK`], forever.
pub fn run(mut lp: ProactiveLoop, store: Store<Pod>, events: mpsc::Sender<SinkMsg>) {
    let clock = Instant::now();
    let mut next_scan = Duration::ZERO;
    loop {
        let now = clock.elapsed();
        if now >= next_scan {
            for ev in lp.scan_store(&store, now) {
                // The sink is bounded; an Event it cannot take now is posted at the pod's next
                // version (the verdict is not made again before).
                let _ = events.try_send(SinkMsg::Event(ev));
            }
            next_scan = now + lp.settings.scan_period;
        }
        let report = lp.tick(now);
        if report.sampled > 0 {
            tracing::trace!(?report, "proactive reclaim tick");
        }
        std::thread::sleep(TICK.saturating_sub(clock.elapsed().saturating_sub(now)));
    }
}
