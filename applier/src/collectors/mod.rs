//! The Performance Collector (issue #7): pressure stall information per pod and container
//! cgroup, and cycles/instructions per container, exposed with the reference's metric names
//! and labels (`koordlet_container_psi`, `koordlet_pod_psi`, `koordlet_container_cpi`).
//!
//! - [`psi`]: the pressure-file parser and reader (pure parser, one read per file).
//! - [`perf_sys`]: `perf_event_open(2)` counter groups (the one `unsafe` module).
//! - [`cpi`]: per-container counter groups over a window, multiplexing scale, sum over CPUs.
//! - [`exposition`]: the metric families and the per-cgroup series handles.
//!
//! [`Collector`] holds, per pod, the pod cgroup and its containers' cgroups with open
//! directory handles and ready series; [`Collector::sync`] follows the pod list (rebuilding a
//! pod only when its `resourceVersion` changes, dropping the series of pods that left),
//! [`Collector::collect_psi`] and [`Collector::start_cpi`]/[`Collector::finish_cpi`] do one
//! round each. [`run_loops`] drives them on their intervals.

pub mod command;
pub mod cpi;
pub mod exposition;
pub mod perf_sys;
pub mod psi;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::cgroup::layout::{ContainerId, Layout, LayoutError};
use crate::cgroup::{CgroupVersion, Controller};
use crate::podview::PodView;

use cpi::{ContainerCounters, PmuStatus};
use exposition::{CollectorMetrics, CpiSeries, Identity, PsiSeries};
use perf_sys::{Event, PerfError};
use psi::{PsiReadError, Resource};

/// The collectors' flags, as the reference names them (with `-seconds`, since ours take
/// integers). Global: `run` and `once --collect` read the same ones.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CollectorArgs {
    /// Feature gates, `Name=bool,...`: `CPICollector`, `PSICollector` (both off by default;
    /// on by default for `once --collect`). `Libpfm4` is accepted and has no effect.
    #[arg(long, env = "KOORD_FEATURE_GATES", default_value = "", global = true)]
    pub feature_gates: String,
    /// Seconds between two CPI windows.
    #[arg(
        long,
        env = "KOORD_CPI_COLLECTOR_INTERVAL_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub cpi_collector_interval_seconds: u64,
    /// Seconds the cycles/instructions counters run in each CPI window.
    #[arg(
        long,
        env = "KOORD_COLLECT_CPI_TIMEWINDOW_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub collect_cpi_timewindow_seconds: u64,
    /// Seconds between two PSI rounds.
    #[arg(
        long,
        env = "KOORD_PSI_COLLECTOR_INTERVAL_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub psi_collector_interval_seconds: u64,
    /// Count task-clock/cpu-clock in place of cycles/instructions (the values are then
    /// nanoseconds): exercises the CPI path on machines without a PMU, for benchmarks only.
    #[arg(long, env = "KOORD_CPI_SOFTWARE_EVENTS", hide = true, global = true)]
    pub cpi_software_events: bool,
}

impl Default for CollectorArgs {
    /// The flags' defaults: both gates off, the reference's intervals.
    fn default() -> Self {
        Self {
            feature_gates: String::new(),
            cpi_collector_interval_seconds: 60,
            collect_cpi_timewindow_seconds: 10,
            psi_collector_interval_seconds: 10,
            cpi_software_events: false,
        }
    }
}

/// The collectors' settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectorConfig {
    pub cpi: bool,
    pub psi: bool,
    pub cpi_interval: Duration,
    pub cpi_window: Duration,
    pub psi_interval: Duration,
    /// Software clocks instead of cycles/instructions (benchmarks on machines without a PMU).
    pub cpi_software_events: bool,
}

impl CollectorConfig {
    /// Both off, reference intervals.
    pub fn disabled() -> Self {
        Self {
            cpi: false,
            psi: false,
            cpi_interval: Duration::from_secs(60),
            cpi_window: Duration::from_secs(10),
            psi_interval: Duration::from_secs(10),
            cpi_software_events: false,
        }
    }

    pub fn any(&self) -> bool {
        self.cpi || self.psi
    }

    /// From the flags; a gate not named takes `default_on`.
    pub fn from_args(a: &CollectorArgs, default_on: bool) -> Result<Self, GateError> {
        let gates = parse_gates(&a.feature_gates)?;
        if a.cpi_collector_interval_seconds == 0
            || a.collect_cpi_timewindow_seconds == 0
            || a.psi_collector_interval_seconds == 0
        {
            return Err(GateError::Interval);
        }
        if a.collect_cpi_timewindow_seconds > a.cpi_collector_interval_seconds {
            return Err(GateError::Window {
                window: a.collect_cpi_timewindow_seconds,
                interval: a.cpi_collector_interval_seconds,
            });
        }
        Ok(Self {
            cpi: gates.cpi.unwrap_or(default_on),
            psi: gates.psi.unwrap_or(default_on),
            cpi_interval: Duration::from_secs(a.cpi_collector_interval_seconds),
            cpi_window: Duration::from_secs(a.collect_cpi_timewindow_seconds),
            psi_interval: Duration::from_secs(a.psi_collector_interval_seconds),
            cpi_software_events: a.cpi_software_events,
        })
    }
}

/// The gates as given; `None` = not named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gates {
    pub cpi: Option<bool>,
    pub psi: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error(
        "--feature-gates: {0:?} is not Name=true|false (known: CPICollector, PSICollector, Libpfm4)"
    )]
    Syntax(String),
    #[error(
        "--feature-gates: unrecognized feature gate {0:?} (known: CPICollector, PSICollector, Libpfm4)"
    )]
    Unknown(String),
    #[error("collector intervals and the CPI window must be at least 1 second")]
    Interval,
    #[error(
        "--collect-cpi-timewindow-seconds ({window}) exceeds --cpi-collector-interval-seconds ({interval})"
    )]
    Window { window: u64, interval: u64 },
}

/// Parses `CPICollector=true,PSICollector=false` (Kubernetes' `--feature-gates` syntax).
pub fn parse_gates(s: &str) -> Result<Gates, GateError> {
    let mut g = Gates::default();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| GateError::Syntax(item.to_owned()))?;
        let value = match value.trim() {
            "true" => true,
            "false" => false,
            _ => return Err(GateError::Syntax(item.to_owned())),
        };
        match name.trim() {
            "CPICollector" => g.cpi = Some(value),
            "PSICollector" => g.psi = Some(value),
            "Libpfm4" => {}
            other => return Err(GateError::Unknown(other.to_owned())),
        }
    }
    Ok(g)
}

/// Whether the CPI collector can count.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CpiState {
    Off,
    On,
    /// Found unusable (probe or first window); said once, then idle.
    Unusable,
}

/// One pod or container cgroup.
struct CgroupEntry {
    who: Identity,
    /// Where its pressure files are (`cpuacct/` or the hybrid `unified/` mount on v1).
    psi_dir: PathBuf,
    /// Where perf finds it (`perf_event/` on v1); containers only.
    perf_dir: Option<PathBuf>,
    /// `psi_dir`, opened once and reused.
    fd: Option<OwnedFd>,
    psi: PsiSeries,
    cpi: CpiSeries,
    /// PSI unavailability already logged for this cgroup.
    psi_warned: bool,
}

struct PodEntry {
    resource_version: Option<String>,
    generation: u64,
    /// The pod cgroup first, then its containers.
    cgroups: Vec<CgroupEntry>,
}

/// What a PSI round saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PsiRound {
    /// Cgroups whose three files were read.
    pub read: usize,
    /// Cgroups with at least one unreadable file.
    pub unavailable: usize,
}

/// Counters running for one window.
pub struct CpiWindow {
    items: Vec<(String, usize, ContainerCounters)>,
    /// Containers left for a following window (descriptor budget).
    pub remaining: usize,
}

impl CpiWindow {
    pub fn containers(&self) -> usize {
        self.items.len()
    }
}

/// The two collectors' state for one node.
pub struct Collector {
    layout: Layout,
    node: String,
    metrics: CollectorMetrics,
    psi_on: bool,
    /// On v1: the hierarchy holding the pressure files, `cpuacct` or `unified`.
    psi_v1_subsystem: &'static str,
    cpi_state: CpiState,
    cpi_events: [Event; 2],
    cpus: Vec<u32>,
    /// Containers per window, from the descriptor limit.
    cpi_batch: usize,
    /// Next container (in iteration order) for a batched round.
    cpi_cursor: usize,
    pods: HashMap<String, PodEntry>,
    generation: u64,
}

/// The directory of `rel` in the v1 hierarchy `subsystem` (v2: the one unified directory).
fn subsystem_dir(layout: &Layout, rel: &Path, subsystem: &str) -> Result<PathBuf, LayoutError> {
    // Validates `rel` (plain names only, stays under the root).
    let unified_or_cpu = layout.dir(rel, Controller::Cpu)?;
    Ok(match layout.version {
        CgroupVersion::V2 => unified_or_cpu,
        CgroupVersion::V1 => layout.root.join(subsystem).join(rel),
    })
}

/// The pressure-file directory of a cgroup: itself on v2; on v1 under `v1_subsystem`:
/// `cpuacct` (Alibaba Cloud Linux with `psi=1 psi_v1=1`) or `unified` (a hybrid host's cgroup2
/// mount, where runc and the kubelet create the same tree).
pub fn psi_dir(layout: &Layout, rel: &Path, v1_subsystem: &str) -> Result<PathBuf, LayoutError> {
    subsystem_dir(layout, rel, v1_subsystem)
}

/// The v1 hierarchies that can hold per-cgroup pressure files, in order of preference.
const PSI_V1_SUBSYSTEMS: [&str; 2] = ["cpuacct", "unified"];

/// The directory perf's cgroup mode takes: itself on v2, under `perf_event/` on v1.
pub fn perf_dir(layout: &Layout, rel: &Path) -> Result<PathBuf, LayoutError> {
    subsystem_dir(layout, rel, "perf_event")
}

fn is_active(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Collector {
    /// Probes the PMU when CPI is on (logging once and exposing the answer) and, on v1,
    /// whether the kernel has per-cgroup PSI at all.
    pub fn new(
        layout: Layout,
        node: impl Into<String>,
        metrics: CollectorMetrics,
        config: &CollectorConfig,
        sys_root: &Path,
    ) -> Self {
        let mut c = Self {
            psi_on: config.psi,
            psi_v1_subsystem: PSI_V1_SUBSYSTEMS[0],
            cpi_state: if config.cpi {
                CpiState::On
            } else {
                CpiState::Off
            },
            cpi_events: if config.cpi_software_events {
                [Event::TaskClock, Event::CpuClock]
            } else {
                cpi::CPI_EVENTS
            },
            cpus: if config.cpi {
                cpi::online_cpus(sys_root)
            } else {
                Vec::new()
            },
            cpi_batch: usize::MAX,
            cpi_cursor: 0,
            layout,
            node: node.into(),
            metrics,
            pods: HashMap::new(),
            generation: 0,
        };
        if config.psi && c.layout.version == CgroupVersion::V1 {
            c.check_v1_psi();
        }
        if config.cpi {
            c.probe_cpi();
            let per_container = c.cpus.len().max(1) * c.cpi_events.len();
            c.cpi_batch = match perf_sys::raise_nofile_limit() {
                // Keep a reserve for sockets, cgroup files and the API connection.
                Ok(limit) => usize::try_from(limit.saturating_sub(256))
                    .unwrap_or(usize::MAX)
                    .checked_div(per_container)
                    .unwrap_or(1)
                    .max(1),
                Err(_) => 1024 / per_container + 1,
            };
        }
        c
    }

    /// Uses other events for the CPI group (tests on machines without a PMU count software
    /// clocks through the same path) and probes them.
    pub fn with_cpi_events(mut self, events: [Event; 2]) -> Self {
        self.cpi_events = events;
        if self.cpi_state != CpiState::Off {
            self.cpi_state = CpiState::On;
            self.probe_cpi();
        }
        self
    }

    /// Caps the containers counted per window (normally derived from `RLIMIT_NOFILE`); a
    /// round over more containers runs consecutive windows.
    pub fn with_cpi_batch(mut self, containers: usize) -> Self {
        self.cpi_batch = containers.max(1);
        self
    }

    pub fn metrics(&self) -> &CollectorMetrics {
        &self.metrics
    }

    /// Whether CPI windows will count anything.
    pub fn cpi_active(&self) -> bool {
        self.cpi_state == CpiState::On
    }

    pub fn psi_active(&self) -> bool {
        self.psi_on
    }

    fn probe_cpi(&mut self) {
        match cpi::probe(&self.cpi_events) {
            PmuStatus::Supported => {
                self.metrics.cpi_supported.set(1);
                tracing::info!(events = ?self.cpi_events, cpus = self.cpus.len(), "CPI collector: counters available");
            }
            status => {
                self.metrics.cpi_supported.set(0);
                self.cpi_state = CpiState::Unusable;
                tracing::warn!(status = ?status, events = ?self.cpi_events, "CPI collector: hardware counters unavailable on this node; koordlet_container_cpi will not be exposed");
            }
        }
    }

    /// Reference behaviour: on v1, PSI needs the Alibaba kernel's `cpuacct/*.pressure` under
    /// kubepods. A hybrid host (cgroup2 mounted at `unified/`, as systemd does) has pressure
    /// files in every cgroup2 directory, and runc and the kubelet create kubepods there too:
    /// used when `cpuacct/` has none. Otherwise the PSI collector stays idle and says so once.
    fn check_v1_psi(&mut self) {
        let root = &self.layout.root;
        let found = PSI_V1_SUBSYSTEMS.into_iter().find(|sub| {
            ["kubepods", "kubepods.slice"].iter().any(|k| {
                Resource::ALL
                    .iter()
                    .all(|r| root.join(sub).join(k).join(r.file()).is_file())
            })
        });
        match found {
            Some(sub) => {
                self.psi_v1_subsystem = sub;
                tracing::info!(dir = %root.join(sub).display(), "PSI collector: cgroup v1, pressure files under {sub}/");
            }
            None => {
                self.psi_on = false;
                tracing::warn!(dir = %root.display(), "PSI collector: cgroup v1 without *.pressure under cpuacct/kubepods (Alibaba Cloud Linux booted with psi=1 psi_v1=1) or unified/kubepods (a hybrid host's cgroup2 mount); PSI will not be exposed");
            }
        }
    }

    /// Follows the pod list: new and changed pods get entries, pods absent from `pods` (or
    /// finished) lose their series. Unchanged pods cost one map lookup.
    pub fn sync<'a>(&mut self, pods: impl IntoIterator<Item = &'a Pod>) {
        self.generation += 1;
        let generation = self.generation;
        for pod in pods {
            if !is_active(pod) {
                continue;
            }
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            let rv = pod.metadata.resource_version.as_deref();
            if let Some(e) = self.pods.get_mut(uid)
                && rv.is_some()
                && e.resource_version.as_deref() == rv
            {
                e.generation = generation;
                continue;
            }
            let old = self.pods.remove(uid);
            let entry = self.build(pod, old, generation);
            self.pods.insert(uid.to_owned(), entry);
        }
        // Dropping an entry drops its series (and closes its directory handle).
        self.pods.retain(|_, e| e.generation == generation);
    }

    fn build(&self, pod: &Pod, old: Option<PodEntry>, generation: u64) -> PodEntry {
        let mut old: Vec<CgroupEntry> = old.map(|e| e.cgroups).unwrap_or_default();
        let mut cgroups = Vec::new();
        match PodView::from_pod(pod) {
            Ok(view) => {
                for (who, rel) in self.identities(&view) {
                    let (Ok(pdir), perf) = (
                        psi_dir(&self.layout, &rel, self.psi_v1_subsystem),
                        who.container
                            .as_ref()
                            .and_then(|_| perf_dir(&self.layout, &rel).ok()),
                    ) else {
                        continue;
                    };
                    // Same cgroup, same labels: keep its handle and series.
                    if let Some(i) = old.iter().position(|o| o.who == who && o.psi_dir == pdir) {
                        cgroups.push(old.swap_remove(i));
                        continue;
                    }
                    cgroups.push(CgroupEntry {
                        who,
                        psi_dir: pdir,
                        perf_dir: perf,
                        fd: None,
                        psi: PsiSeries::default(),
                        cpi: CpiSeries::default(),
                        psi_warned: false,
                    });
                }
            }
            Err(e) => {
                tracing::debug!(pod = ?pod.metadata.name, error = %e, "collectors: pod skipped");
            }
        }
        // Cgroups of `old` not carried over (a replaced container) drop here with their series.
        drop(old);
        PodEntry {
            resource_version: pod.metadata.resource_version.clone(),
            generation,
            cgroups,
        }
    }

    /// The pod cgroup and each started container's, with the labels the reference gives them.
    /// Paths are built only from the validated UID and container IDs.
    fn identities(&self, view: &PodView) -> Vec<(Identity, PathBuf)> {
        let Ok(pod_rel) = self.layout.pod_dir(&view.uid, view.kube_qos) else {
            return Vec::new();
        };
        let base = Identity {
            node: self.node.clone(),
            pod_uid: view.uid.clone(),
            pod_name: view.name.clone(),
            pod_namespace: view.namespace.clone(),
            container: None,
        };
        let mut out = vec![(base.clone(), pod_rel.clone())];
        for c in &view.containers {
            let Some(raw) = c.container_id.as_deref() else {
                continue;
            };
            let Ok(id) = ContainerId::parse(raw) else {
                tracing::debug!(container = %c.name, "collectors: container ID refused");
                continue;
            };
            let rel = pod_rel.join(self.layout.container_leaf(&id));
            out.push((
                Identity {
                    container: Some((raw.to_owned(), c.name.clone())),
                    ..base.clone()
                },
                rel,
            ));
        }
        out
    }

    /// Appends the text exposition of `koordlet_container_cpi`, `koordlet_container_psi` and
    /// `koordlet_pod_psi` (pods in UID order, so the output is stable).
    pub fn render_text(&self, out: &mut String) {
        let mut pods: Vec<(&String, &PodEntry)> = self.pods.iter().collect();
        pods.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let cgroups = pods
            .iter()
            .flat_map(|(_, p)| p.cgroups.iter())
            .map(|c| (&c.who, &c.psi, &c.cpi));
        exposition::render_cgroups(out, cgroups);
    }

    /// Number of pods and container cgroups followed.
    pub fn counts(&self) -> (usize, usize) {
        let containers = self
            .pods
            .values()
            .map(|p| p.cgroups.len().saturating_sub(1))
            .sum();
        (self.pods.len(), containers)
    }

    /// One PSI round over every followed cgroup.
    pub fn collect_psi(&mut self) -> PsiRound {
        let mut round = PsiRound::default();
        if !self.psi_on {
            return round;
        }
        for pod in self.pods.values_mut() {
            for cg in &mut pod.cgroups {
                if cg.read_psi() {
                    round.read += 1;
                } else {
                    round.unavailable += 1;
                }
            }
        }
        self.metrics
            .psi_unavailable
            .set(i64::try_from(round.unavailable).unwrap_or(i64::MAX));
        round
    }

    /// Opens the counters of the next batch of containers and starts them. `None` when CPI
    /// is off or unusable. The caller sleeps the window, then calls [`Self::finish_cpi`].
    pub fn start_cpi(&mut self) -> Option<CpiWindow> {
        if self.cpi_state != CpiState::On {
            return None;
        }
        let mut containers: Vec<(String, usize, PathBuf)> = Vec::new();
        for (uid, pod) in &self.pods {
            for (i, cg) in pod.cgroups.iter().enumerate() {
                if let Some(dir) = &cg.perf_dir {
                    containers.push((uid.clone(), i, dir.clone()));
                }
            }
        }
        // Stable order so batches cover everyone.
        containers.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let total = containers.len();
        let start = if self.cpi_cursor >= total {
            0
        } else {
            self.cpi_cursor
        };
        let end = start.saturating_add(self.cpi_batch).min(total);
        let mut items = Vec::with_capacity(end - start);
        for (uid, i, dir) in containers.drain(start..end) {
            match cpi::open_container(&dir, &self.cpus, &self.cpi_events) {
                Ok(c) => items.push((uid, i, c)),
                Err(PerfError::Unsupported(e) | PerfError::Permission(e)) => {
                    self.metrics.cpi_supported.set(0);
                    self.cpi_state = CpiState::Unusable;
                    tracing::warn!(error = %e, dir = %dir.display(), "CPI collector: cannot count per cgroup on this node; stopping");
                    return None;
                }
                Err(PerfError::FdLimit(e)) => {
                    tracing::warn!(error = %e, opened = items.len(), "CPI collector: out of descriptors; counting fewer containers this window");
                    break;
                }
                Err(e) => {
                    // Typically the container's cgroup went away between sync and now.
                    tracing::debug!(error = %e, dir = %dir.display(), "CPI collector: container skipped");
                }
            }
        }
        for (_, _, c) in &items {
            c.enable();
        }
        self.cpi_cursor = if end >= total { 0 } else { end };
        Some(CpiWindow {
            items,
            remaining: total - end,
        })
    }

    /// Stops, reads, scales and sums the window's counters and stores them.
    pub fn finish_cpi(&mut self, window: CpiWindow) {
        for (uid, i, counters) in window.items {
            let sums = counters.finish::<2>();
            let Some(cg) = self.pods.get_mut(&uid).and_then(|p| p.cgroups.get_mut(i)) else {
                continue; // the pod left during the window
            };
            match sums {
                Some([cycles, instructions]) => cg.cpi.set(cycles, instructions),
                None => cg.cpi.clear(),
            }
        }
    }

    /// One complete CPI round, sleeping the window on this thread (`once --collect`).
    pub fn collect_cpi_blocking(&mut self, window: Duration) {
        loop {
            let Some(w) = self.start_cpi() else { return };
            std::thread::sleep(window);
            let remaining = w.remaining;
            self.finish_cpi(w);
            if remaining == 0 {
                return;
            }
        }
    }
}

impl CgroupEntry {
    /// Reads the three files; `false` if any was unreadable (said once per cgroup).
    fn read_psi(&mut self) -> bool {
        if self.fd.is_none() {
            match psi::open_dir(&self.psi_dir) {
                Ok(fd) => self.fd = Some(fd),
                Err(e) => {
                    // Not created yet (container starting) or gone: quietly retried next round.
                    tracing::debug!(dir = %self.psi_dir.display(), error = %e, "PSI: cgroup directory not there");
                    self.psi.clear_all();
                    return false;
                }
            }
        }
        let Some(fd) = &self.fd else { return false };
        let mut all = true;
        let mut gone = false;
        for res in Resource::ALL {
            match psi::read_resource(fd, res) {
                Ok(p) => self.psi.set(res, &p),
                Err(e) => {
                    all = false;
                    self.psi.clear(res);
                    if !self.psi_warned {
                        self.psi_warned = true;
                        tracing::warn!(dir = %self.psi_dir.display(), error = %e, "PSI unavailable for this cgroup; its psi series are not exposed (said once)");
                    }
                    // A removed cgroup: drop the stale handle and reopen by path next time.
                    gone |= matches!(e, PsiReadError::Missing { .. }) && !self.psi_dir.is_dir();
                }
            }
        }
        if gone {
            self.fd = None;
        }
        all
    }
}

/// The node name for labels outside `run`: the pod's `spec.nodeName`, else `$NODE_NAME`, else
/// the kernel's host name.
pub fn node_name_for(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default()
}

/// Reads a Pod, or a `List`/`PodList` of pods (`kubectl get pods -o yaml`), from YAML or JSON.
pub fn read_pods(path: &Path) -> Result<Vec<Pod>, crate::once::OnceError> {
    let text = std::fs::read_to_string(path).map_err(|source| crate::once::OnceError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let parse_err = |source| crate::once::OnceError::Parse {
        path: path.display().to_string(),
        source,
    };
    let value: serde_yaml::Value = serde_yaml::from_str(&text).map_err(parse_err)?;
    let is_list = value
        .get("kind")
        .and_then(serde_yaml::Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    if is_list {
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<Pod>,
        }
        let list: List = serde_yaml::from_value(value).map_err(parse_err)?;
        Ok(list.items)
    } else {
        Ok(vec![serde_yaml::from_value(value).map_err(parse_err)?])
    }
}

/// `once --collect`: one PSI round and one CPI window for `pods`, then the text exposition of
/// the collectors' families.
pub fn collect_once(
    layout: Layout,
    sys_root: &Path,
    config: &CollectorConfig,
    pods: &[Pod],
) -> String {
    let registry = prometheus::Registry::new();
    let metrics = CollectorMetrics::new();
    // A fresh registry and constant names: registration cannot clash.
    let _ = metrics.register(&registry, config.psi, config.cpi);
    let node = pods.first().map(node_name_for).unwrap_or_default();
    let mut c = Collector::new(layout, node, metrics, config, sys_root);
    c.sync(pods.iter());
    c.collect_psi();
    c.collect_cpi_blocking(config.cpi_window);
    let mut text = exposition::render(&registry);
    c.render_text(&mut text);
    text
}

/// A collector shared by its loops and the `/metrics` renderer.
pub type SharedCollector = Arc<Mutex<Collector>>;

/// The renderer to hand to [`crate::metrics::Metrics::add_text_source`].
pub fn text_source(c: &SharedCollector) -> crate::metrics::TextSource {
    let c = c.clone();
    Box::new(move |out: &mut String| lock(&c).render_text(out))
}

fn lock(c: &Mutex<Collector>) -> std::sync::MutexGuard<'_, Collector> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the PSI and CPI loops forever on their intervals; `pods` gives the current pod list
/// each round (the reflector's store in `run`, a fixed list otherwise).
pub async fn run_loops<F>(collector: SharedCollector, config: CollectorConfig, pods: F)
where
    F: Fn() -> Vec<Arc<Pod>> + Send + Sync + 'static,
{
    let (psi_on, cpi_on) = {
        let c = lock(&collector);
        (c.psi_active(), c.cpi_active())
    };
    let pods = Arc::new(pods);
    let psi = {
        let (collector, pods) = (collector.clone(), pods.clone());
        async move {
            if !psi_on {
                return;
            }
            let mut tick = tokio::time::interval(config.psi_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let (c, p) = (collector.clone(), pods.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    let list = p();
                    let mut c = lock(&c);
                    c.sync(list.iter().map(|p| &**p));
                    c.collect_psi()
                })
                .await;
            }
        }
    };
    let cpi = async move {
        if !cpi_on {
            return;
        }
        let mut tick = tokio::time::interval(config.cpi_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            loop {
                let (c, p) = (collector.clone(), pods.clone());
                let Ok(Some(window)) = tokio::task::spawn_blocking(move || {
                    let list = p();
                    let mut c = lock(&c);
                    c.sync(list.iter().map(|p| &**p));
                    c.start_cpi()
                })
                .await
                else {
                    break;
                };
                tokio::time::sleep(config.cpi_window).await;
                let remaining = window.remaining;
                let c = collector.clone();
                let _ = tokio::task::spawn_blocking(move || lock(&c).finish_cpi(window)).await;
                if remaining == 0 {
                    break;
                }
            }
        }
    };
    tokio::join!(psi, cpi);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_like_kubernetes() {
        assert_eq!(parse_gates("").expect("empty"), Gates::default());
        assert_eq!(
            parse_gates("CPICollector=true,PSICollector=false").expect("valid"),
            Gates {
                cpi: Some(true),
                psi: Some(false)
            }
        );
        assert_eq!(
            parse_gates(" PSICollector=true , Libpfm4=true").expect("valid"),
            Gates {
                cpi: None,
                psi: Some(true)
            }
        );
        assert!(matches!(
            parse_gates("CPICollector"),
            Err(GateError::Syntax(_))
        ));
        assert!(matches!(
            parse_gates("CPICollector=yes"),
            Err(GateError::Syntax(_))
        ));
        assert!(matches!(
            parse_gates("Foo=true"),
            Err(GateError::Unknown(_))
        ));
    }

    fn args(gates: &str, cpi: u64, window: u64, psi: u64) -> CollectorArgs {
        CollectorArgs {
            feature_gates: gates.to_owned(),
            cpi_collector_interval_seconds: cpi,
            collect_cpi_timewindow_seconds: window,
            psi_collector_interval_seconds: psi,
            cpi_software_events: false,
        }
    }

    #[test]
    fn config_defaults_and_checks() {
        let c = CollectorConfig::from_args(&args("", 60, 10, 10), false).expect("valid");
        assert_eq!(c, CollectorConfig::disabled());
        assert!(!c.any());
        let c = CollectorConfig::from_args(&args("PSICollector=true", 60, 10, 10), false)
            .expect("valid");
        assert!(c.psi && !c.cpi);
        let c = CollectorConfig::from_args(&args("CPICollector=false", 60, 10, 10), true)
            .expect("valid");
        assert!(c.psi && !c.cpi, "once --collect: unnamed gates default on");
        assert_eq!(
            CollectorConfig::from_args(&args("", 5, 10, 10), false),
            Err(GateError::Window {
                window: 10,
                interval: 5
            })
        );
        assert_eq!(
            CollectorConfig::from_args(&args("", 60, 10, 0), false),
            Err(GateError::Interval)
        );
    }

    #[test]
    fn v1_dirs_use_cpuacct_and_perf_event() {
        let rel = Path::new("kubepods/burstable/podabc/cid");
        let v1 = Layout::new(
            "/cg",
            CgroupVersion::V1,
            crate::cgroup::CgroupDriver::Cgroupfs,
        );
        assert_eq!(
            psi_dir(&v1, rel, "cpuacct").expect("ok"),
            PathBuf::from("/cg/cpuacct/kubepods/burstable/podabc/cid")
        );
        assert_eq!(
            psi_dir(&v1, rel, "unified").expect("ok"),
            PathBuf::from("/cg/unified/kubepods/burstable/podabc/cid")
        );
        assert_eq!(
            perf_dir(&v1, rel).expect("ok"),
            PathBuf::from("/cg/perf_event/kubepods/burstable/podabc/cid")
        );
        let v2 = Layout::new(
            "/cg",
            CgroupVersion::V2,
            crate::cgroup::CgroupDriver::Cgroupfs,
        );
        assert_eq!(
            psi_dir(&v2, rel, "cpuacct").expect("ok"),
            PathBuf::from("/cg/kubepods/burstable/podabc/cid")
        );
        assert!(psi_dir(&v2, Path::new("../etc"), "cpuacct").is_err());
    }
}
