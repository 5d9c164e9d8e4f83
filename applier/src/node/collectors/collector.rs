//! The two collectors' state for one node: per pod, the pod cgroup and its containers' cgroups
//! with open directory handles and ready series. [`Collector::sync`] follows the pod list
//! (rebuilding a pod only when its `resourceVersion` changes, dropping the series of pods that
//! left), [`Collector::collect_psi`] and [`Collector::start_cpi`]/[`Collector::finish_cpi`] do
//! one round each.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use koord_translator::cgroup::file as cgroup_file;
use koord_translator::cgroup::layout::{Layout, LayoutError};
use koord_translator::cgroup::{CgroupVersion, Controller};
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::cpi::{self, ContainerCounters, PmuStatus};
use super::exposition::{CpiSeries, Identity, PsiSeries};
use super::gates::CollectorConfig;
use super::metrics::CollectorMetrics;
use super::perf_sys::{Event, PerfError};
use crate::node::shared::container_dir::container_rel;
use crate::node::shared::psi::{self, PsiReadError, Resource};

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
    /// The pod's `koordinator.sh/qosClass` label (a known class, else `none`), for
    /// `koord_applier_pod_qos_info`.
    qos_class: &'static str,
}

/// The product's QoS class of a pod as its label says (the webhook sets it); `none` when it
/// has none or one no class is named.
fn qos_class_of(pod: &Pod) -> &'static str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(koord_api::keys::LABEL_QOS_CLASS))
        .and_then(|v| koord_api::QosClass::from_name(v))
        .map_or("none", koord_api::QosClass::as_str)
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
    psi_v1_controller: Controller,
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

/// The pressure-file directory of a cgroup: itself on v2; on v1 under `v1_controller`:
/// `cpuacct` (Alibaba Cloud Linux with `psi=1 psi_v1=1`) or `unified` (a hybrid host's cgroup2
/// mount, where runc and the kubelet create the same tree).
pub fn psi_dir(
    layout: &Layout,
    rel: &Path,
    v1_controller: Controller,
) -> Result<PathBuf, LayoutError> {
    layout.dir(rel, v1_controller)
}

/// The v1 hierarchies that can hold per-cgroup pressure files, in order of preference.
const PSI_V1_CONTROLLERS: [Controller; 2] = [Controller::Cpuacct, Controller::Unified];

/// The directory perf's cgroup mode takes: itself on v2, under `perf_event/` on v1.
pub fn perf_dir(layout: &Layout, rel: &Path) -> Result<PathBuf, LayoutError> {
    layout.dir(rel, Controller::PerfEvent)
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
            psi_v1_controller: PSI_V1_CONTROLLERS[0],
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
            // Keep a reserve for sockets, cgroup files and the API connection.
            c.cpi_batch = koord_translator::fd_limit::raise_to_hard()
                .saturating_sub(256)
                .checked_div(per_container)
                .unwrap_or(1)
                .max(1);
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
        let kubepods = self.layout.kubepods_dir();
        let found = PSI_V1_CONTROLLERS.into_iter().find(|c| {
            Resource::ALL.iter().all(|r| {
                root.join(c.dir_name())
                    .join(&kubepods)
                    .join(r.file())
                    .is_file()
            })
        });
        match found {
            Some(c) => {
                self.psi_v1_controller = c;
                tracing::info!(dir = %root.join(c.dir_name()).display(), "PSI collector: cgroup v1, pressure files under this hierarchy");
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
            if !phase::is_active(pod) {
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
        match PodSpecView::from_pod(pod) {
            Ok(view) => {
                for (who, rel) in self.identities(&view) {
                    let (Ok(pdir), perf) = (
                        psi_dir(&self.layout, &rel, self.psi_v1_controller),
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
            qos_class: qos_class_of(pod),
        }
    }

    /// The pod cgroup and each started container's, with the labels the reference gives them.
    /// Paths are built only from the validated UID and container IDs.
    fn identities(&self, view: &PodSpecView) -> Vec<(Identity, PathBuf)> {
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
            let Ok(rel) = container_rel(&self.layout, view, raw) else {
                tracing::debug!(container = %c.name, "collectors: container ID refused");
                continue;
            };
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
        super::exposition::render_cgroups(out, cgroups);
        // The pod cgroup's identity (the first entry) with the pod's class.
        let infos = pods
            .iter()
            .filter_map(|(_, p)| p.cgroups.first().map(|c| (&c.who, p.qos_class)));
        super::exposition::render_pod_qos_info(out, infos);
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
            match cgroup_file::open_dir(&self.psi_dir) {
                Ok(fd) => self.fd = Some(fd),
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        // Not created yet (container starting) or gone: retried next round.
                        tracing::debug!(dir = %self.psi_dir.display(), "PSI: cgroup directory not there");
                    } else {
                        cgroup_file::report(&self.psi_dir, &e);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_dirs_use_cpuacct_and_perf_event() {
        let rel = Path::new("kubepods/burstable/podabc/cid");
        let v1 = Layout::new(
            "/cg",
            CgroupVersion::V1,
            koord_translator::cgroup::CgroupDriver::Cgroupfs,
        );
        assert_eq!(
            psi_dir(&v1, rel, Controller::Cpuacct).expect("ok"),
            PathBuf::from("/cg/cpuacct/kubepods/burstable/podabc/cid")
        );
        assert_eq!(
            psi_dir(&v1, rel, Controller::Unified).expect("ok"),
            PathBuf::from("/cg/unified/kubepods/burstable/podabc/cid")
        );
        assert_eq!(
            perf_dir(&v1, rel).expect("ok"),
            PathBuf::from("/cg/perf_event/kubepods/burstable/podabc/cid")
        );
        let v2 = Layout::new(
            "/cg",
            CgroupVersion::V2,
            koord_translator::cgroup::CgroupDriver::Cgroupfs,
        );
        assert_eq!(
            psi_dir(&v2, rel, Controller::Cpuacct).expect("ok"),
            PathBuf::from("/cg/kubepods/burstable/podabc/cid")
        );
        assert!(psi_dir(&v2, Path::new("../etc"), Controller::Cpuacct).is_err());
    }
}
