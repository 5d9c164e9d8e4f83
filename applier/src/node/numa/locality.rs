//! One locality pass over a pod: per container, find its processes (`cgroup.procs`) and CPUs
//! (`cpuset.cpus`, else the processes' `Cpus_allowed_list`), pick local and remote nodes,
//! measure from `numa_maps`, move the remote pages, measure again.
//!
//! IO lives here; the decisions are in [`super::target`], the arithmetic in
//! [`super::numa_maps`], the texts in [`super::message`], the syscalls in
//! [`super::migrate_sys`].

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use koord_api::{LocalityPolicy, ResolvedMemoryLocality, ResolvedQos};
use procfs_core::FromRead as _;
use procfs_core::process::Status;
use rustix::io::Errno;

use koord_translator::cgroup::CgroupVersion;
use koord_translator::cgroup::Controller;
use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::{Layout, LayoutError};
use koord_translator::pod::spec_view::PodSpecView;

use super::LocalityConfig;
use super::migrate_sys::{self, MPOL_MF_MOVE, SysError};
use super::numa_maps::{NodeUsage, VmaNodes, parse_vmas};
use super::report::{ContainerLocality, ContainerStatus, FailedPid, LocalityReport, Method};
use super::target::{NO_TARGET_NUMA, Target, select};
use super::timings::{ContainerTimings, PassTimings, micros, micros_since};
use super::topology::{IdSet, Topology, TopologyError};
use crate::cpu_list::{format_list, parse_list};
use crate::node::shared::container_dir::container_rel;

/// Pages queried per `move_pages(nodes = NULL)` call.
const QUERY_CHUNK: usize = 4096;
/// Upper bound of one `move_pages` batch (the mmap lock is held per call).
const MAX_BATCH: u64 = 4096;
/// First size of the buffer every `numa_maps` of a container pass is read into (a process
/// with a few hundred VMAs fits; a larger one grows it once for the rest of the pass).
const NUMA_MAPS_BUFFER: usize = 64 << 10;

/// Where a container's processes and cpuset are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCgroup {
    /// Holds `cpuset.cpus` (v1: the cpuset controller's directory).
    pub cpuset_dir: PathBuf,
    /// Holds `cgroup.procs`.
    pub procs_dir: PathBuf,
}

/// The container's cgroup from the pod UID, QoS class and container ID (never from free text).
pub fn container_cgroup(
    layout: &Layout,
    pod: &PodSpecView,
    container_id: &str,
) -> Result<ContainerCgroup, LayoutError> {
    let rel = container_rel(layout, pod, container_id)?;
    // Layout::dir validates `rel`; the cpuset directory is its sibling under the root.
    let memory = layout.dir(&rel, Controller::Memory)?;
    Ok(match layout.version {
        CgroupVersion::V2 => ContainerCgroup {
            cpuset_dir: memory.clone(),
            procs_dir: memory,
        },
        CgroupVersion::V1 => {
            let cpuset = layout.root.join("cpuset").join(&rel);
            let procs_dir = if cpuset.join("cgroup.procs").exists() {
                cpuset.clone()
            } else {
                memory
            };
            ContainerCgroup {
                cpuset_dir: cpuset,
                procs_dir,
            }
        }
    })
}

/// The pod's locality decision, when its annotation asks for one (`bestEffort`).
pub fn pod_locality(pod: &PodSpecView) -> Option<ResolvedMemoryLocality> {
    let raw = pod.resolved_qos.as_deref()?;
    let q = ResolvedQos::from_annotation(raw).ok()?;
    q.memory_locality
        .filter(|l| l.policy == LocalityPolicy::BestEffort)
}

/// Runs locality passes on this node.
#[derive(Debug, Clone)]
pub struct Migrator {
    pub layout: Layout,
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub config: LocalityConfig,
}

/// The processes of a started container's cgroup; a cgroup that is not there fails.
fn read_pids(dir: &Path) -> Result<Vec<u32>, String> {
    let text = file::read_existing(&dir.join("cgroup.procs")).map_err(|e| e.to_string())?;
    let mut pids: Vec<u32> = text
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|p| *p > 0)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Reads the whole file into `buf` (cleared first), keeping its allocation.
fn read_into(path: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    std::fs::File::open(path)?.read_to_end(buf).map(drop)
}

/// `Cpus_allowed_list` and `Mems_allowed_list` of a `/proc/<pid>/status` text (`None` each
/// when missing or not a kernel list). Only these two lines are looked at: the pass needs
/// nothing else of the fifty-odd fields, so nothing is allocated for them.
fn allowed_lists(status: &[u8]) -> (Option<IdSet>, Option<IdSet>) {
    let (mut cpus, mut mems) = (None, None);
    for line in status.split(|b| *b == b'\n') {
        let slot = if let Some(v) = line.strip_prefix(b"Cpus_allowed_list:") {
            (&mut cpus, v)
        } else if let Some(v) = line.strip_prefix(b"Mems_allowed_list:") {
            (&mut mems, v)
        } else {
            continue;
        };
        *slot.0 = std::str::from_utf8(slot.1)
            .ok()
            .and_then(|v| parse_list(v).ok());
    }
    (cpus, mems)
}

impl Migrator {
    pub fn new(
        layout: Layout,
        proc_root: PathBuf,
        sys_root: PathBuf,
        config: LocalityConfig,
    ) -> Self {
        Self {
            layout,
            proc_root,
            sys_root,
            config,
        }
    }

    fn proc_file(&self, pid: u32, name: &str) -> PathBuf {
        self.proc_root.join(pid.to_string()).join(name)
    }

    /// The cpuset of the container: `cpuset.cpus.effective` (v2), `cpuset.cpus`, else the
    /// union of its processes' `Cpus_allowed_list`. Also the intersection of their
    /// `Mems_allowed_list` when readable.
    fn cpus_and_mems(&self, cg: &ContainerCgroup, pids: &[u32]) -> (IdSet, Option<IdSet>) {
        let mut cpus = None;
        // v1 has no `cpuset.cpus.effective` file: absent, and the next one is read.
        for name in ["cpuset.cpus.effective", "cpuset.cpus"] {
            if let Some(text) = file::read_or_report(&cg.cpuset_dir.join(name))
                && let Ok(set) = parse_list(&text)
                && !set.is_empty()
            {
                cpus = Some(set);
                break;
            }
        }
        let mut from_procs = IdSet::new();
        let mut mems: Option<IdSet> = None;
        let mut buf = Vec::with_capacity(4096);
        for pid in pids {
            if read_into(&self.proc_file(*pid, "status"), &mut buf).is_err() {
                continue;
            }
            let (cpus_allowed, mems_allowed) = allowed_lists(&buf);
            if cpus.is_none()
                && let Some(set) = cpus_allowed
            {
                from_procs.extend(set);
            }
            if let Some(set) = mems_allowed {
                mems = Some(match mems {
                    None => set,
                    Some(m) => m.intersection(&set).copied().collect(),
                });
            }
        }
        (cpus.unwrap_or(from_procs), mems)
    }

    /// Gone from /proc, or a zombie / dead task (`State: Z` or `X`).
    fn has_exited(&self, pid: u32) -> bool {
        match std::fs::read(self.proc_file(pid, "status")) {
            Err(_) => true,
            Ok(text) => Status::from_read(text.as_slice())
                .is_ok_and(|s| s.state.starts_with('Z') || s.state.starts_with('X')),
        }
    }

    /// Sum of the processes' numa_maps, each read into `buf`; a process that is gone
    /// contributes nothing.
    fn measure(&self, pids: &[u32], buf: &mut Vec<u8>) -> Result<NodeUsage, String> {
        let mut total = NodeUsage::default();
        for pid in pids {
            if read_into(&self.proc_file(*pid, "numa_maps"), buf).is_err() {
                continue;
            }
            let u = NodeUsage::parse(&buf[..]).map_err(|e| format!("pid {pid}: {e}"))?;
            total.add(&u);
        }
        Ok(total)
    }

    /// One container: its processes and target nodes, a measurement, the migration, a second
    /// measurement (only when a syscall was made: otherwise nothing moved and the first
    /// measurement is the result).
    pub fn run_container(
        &self,
        topo: &Topology,
        pod: &PodSpecView,
        name: &str,
        container_id: &str,
    ) -> ContainerLocality {
        let mut timings = ContainerTimings::default();
        let started = Instant::now();
        let planned = match container_cgroup(&self.layout, pod, container_id) {
            Ok(cg) => self.plan_container(topo, name, &cg),
            Err(e) => Err(Box::new(ContainerLocality::new(
                name,
                ContainerStatus::Failed,
                Some(e.to_string()),
            ))),
        };
        timings.cgroup_micros = micros_since(started);
        let (pids, local, remote) = match planned {
            Ok(p) => p,
            Err(mut done) => {
                done.timings = Some(timings);
                return *done;
            }
        };
        let failed = |reason: String, timings| {
            let mut c = ContainerLocality::new(name, ContainerStatus::Failed, Some(reason));
            c.timings = Some(timings);
            c
        };
        // One buffer for every numa_maps of the container, before and after.
        let mut buf = Vec::with_capacity(NUMA_MAPS_BUFFER);
        let started = Instant::now();
        let before = self.measure(&pids, &mut buf);
        timings.numa_maps_before_micros = micros_since(started);
        let before = match before {
            Ok(u) => u.locality(&local),
            Err(e) => return failed(e, timings),
        };
        let mut c = ContainerLocality::new(name, ContainerStatus::Completed, None);
        c.local_nodes = local.clone();
        c.remote_nodes = if before.remote_nodes.is_empty() {
            remote.clone()
        } else {
            before.remote_nodes.clone()
        };
        let after = if before.remote_pages > 0 {
            self.migrate_processes(&mut c, &pids, &local, &remote);
            timings.migrate_micros = c.migrate_micros;
            let started = Instant::now();
            let after = self.measure(&pids, &mut buf);
            timings.numa_maps_after_micros = micros_since(started);
            match after {
                Ok(u) => u.locality(&local),
                Err(e) => return failed(e, timings),
            }
        } else {
            before.clone()
        };
        c.pages_migrated = before.remote_pages.saturating_sub(after.remote_pages);
        settle_failures(&mut c);
        c.pids = pids;
        c.before = Some(before);
        c.after = Some(after);
        c.timings = Some(timings);
        c
    }

    /// The container's processes and its local and remote nodes; `Err` with the finished
    /// outcome when there is nothing to migrate (no process, no target) or it cannot be read.
    fn plan_container(
        &self,
        topo: &Topology,
        name: &str,
        cg: &ContainerCgroup,
    ) -> Result<(Vec<u32>, IdSet, IdSet), Box<ContainerLocality>> {
        let pids = read_pids(&cg.procs_dir).map_err(|e| {
            Box::new(ContainerLocality::new(
                name,
                ContainerStatus::Failed,
                Some(e),
            ))
        })?;
        if pids.is_empty() {
            return Err(Box::new(ContainerLocality::new(
                name,
                ContainerStatus::Skipped,
                Some("no running process".to_owned()),
            )));
        }
        let (cpus, mems) = self.cpus_and_mems(cg, &pids);
        match select(topo, &cpus, mems.as_ref()) {
            Target::Skip(why) => {
                tracing::debug!(container = name, cpus = %format_list(&cpus), %why, "memory locality: no target numa");
                let mut c = ContainerLocality::new(
                    name,
                    ContainerStatus::Skipped,
                    Some(NO_TARGET_NUMA.to_owned()),
                );
                c.pids = pids;
                Err(Box::new(c))
            }
            Target::Migrate { local, remote } => Ok((pids, local, remote)),
        }
    }

    /// Moves every process's remote pages to the local nodes, recording time and failures.
    fn migrate_processes(
        &self,
        c: &mut ContainerLocality,
        pids: &[u32],
        local: &IdSet,
        remote: &IdSet,
    ) {
        c.method = Some(match self.config.max_pages_per_second {
            Some(_) => Method::MovePages,
            None => Method::MigratePages,
        });
        for pid in pids {
            let started = Instant::now();
            let r = match self.config.max_pages_per_second {
                Some(rate) => self.move_batched(*pid, local, remote, rate),
                None => migrate_sys::migrate_pages(*pid, remote, local),
            };
            c.migrate_micros = c.migrate_micros.saturating_add(micros(started.elapsed()));
            match r {
                Ok(not_moved) => c.pages_not_moved += not_moved,
                Err(e) => {
                    // An exiting process answers EINVAL (no mm left) before it is reaped:
                    // that is the same "exited mid-migration" as ESRCH.
                    let e = if !e.is_gone() && self.has_exited(*pid) {
                        SysError(Errno::SRCH)
                    } else {
                        e
                    };
                    c.failed_pids.push(FailedPid {
                        pid: *pid,
                        error: e.to_string(),
                    });
                }
            }
        }
    }

    /// `move_pages(2)` in batches, at most `rate` pages per second: only VMAs that hold remote
    /// pages are walked, each page is queried, and the remote ones are moved round-robin to
    /// the local nodes. Returns the pages that could not be moved.
    fn move_batched(
        &self,
        pid: u32,
        local: &IdSet,
        remote: &IdSet,
        rate: u64,
    ) -> Result<u64, SysError> {
        let gone = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SysError(Errno::SRCH)
            } else {
                SysError(Errno::from_io_error(&e).unwrap_or(Errno::IO))
            }
        };
        let numa_maps = std::fs::read(self.proc_file(pid, "numa_maps")).map_err(gone)?;
        let maps = std::fs::read_to_string(self.proc_file(pid, "maps")).map_err(gone)?;
        let ends = vma_ends(&maps);
        let vmas: Vec<VmaNodes> = parse_vmas(&numa_maps).map_err(|_| SysError(Errno::INVAL))?;
        let targets: Vec<i32> = local.iter().map(|n| *n as i32).collect();
        let batch = (rate / 20).clamp(1, MAX_BATCH) as usize;
        let started = Instant::now();
        let (mut done, mut not_moved, mut rr) = (0u64, 0u64, 0usize);
        for vma in vmas
            .iter()
            .filter(|v| v.pages.iter().any(|(n, p)| remote.contains(n) && *p > 0))
        {
            let Some(&end) = ends.get(&vma.start) else {
                continue;
            };
            // Chunk by chunk: a large sparse VMA never becomes one huge address list.
            let step = vma.page_size.max(4096);
            let span = step.saturating_mul(QUERY_CHUNK as u64);
            let mut from = vma.start;
            while from < end {
                let to = from.saturating_add(span).min(end);
                let chunk: Vec<u64> = (from..to).step_by(step as usize).collect();
                let chunk = chunk.as_slice();
                from = to;
                let status = migrate_sys::query_pages(pid, chunk)?;
                let on_remote: Vec<u64> = chunk
                    .iter()
                    .zip(&status)
                    .filter(|(_, s)| **s >= 0 && remote.contains(&(**s as u32)))
                    .map(|(a, _)| *a)
                    .collect();
                for part in on_remote.chunks(batch) {
                    let nodes: Vec<i32> = part
                        .iter()
                        .map(|_| {
                            rr = rr.wrapping_add(1);
                            targets[rr % targets.len()]
                        })
                        .collect();
                    let (_, st) = migrate_sys::move_pages(pid, part, &nodes, MPOL_MF_MOVE)?;
                    not_moved += st.iter().zip(&nodes).filter(|(s, n)| s != n).count() as u64;
                    done += part.len() as u64;
                    let due = Duration::from_secs_f64(done as f64 / rate as f64);
                    let elapsed = started.elapsed();
                    if due > elapsed {
                        std::thread::sleep(due - elapsed);
                    }
                }
            }
        }
        Ok(not_moved)
    }

    /// The pass over every started container of `pod`, with its timings.
    pub fn run_pod(&self, pod: &PodSpecView) -> LocalityReport {
        let started = Instant::now();
        let topology = Topology::read(&self.sys_root);
        let topology_micros = micros_since(started);
        let mut report = self.run_containers(pod, topology);
        report.timings = Some(PassTimings {
            pass_micros: micros_since(started),
            topology_micros,
        });
        report
    }

    fn run_containers(
        &self,
        pod: &PodSpecView,
        topology: Result<Topology, TopologyError>,
    ) -> LocalityReport {
        let topo = match topology {
            Ok(t) => t,
            Err(e) => {
                let containers = pod
                    .containers
                    .iter()
                    .filter(|c| c.container_id.is_some())
                    .map(|c| {
                        ContainerLocality::new(
                            &c.name,
                            ContainerStatus::Failed,
                            Some(e.to_string()),
                        )
                    })
                    .collect();
                return LocalityReport::new(containers);
            }
        };
        let mut out = Vec::new();
        for c in &pod.containers {
            let Some(id) = c.container_id.as_deref() else {
                continue;
            };
            out.push(self.run_container(&topo, pod, &c.name, id));
        }
        LocalityReport::new(out)
    }
}

/// A process that failed for another reason than exiting fails the container.
fn settle_failures(c: &mut ContainerLocality) {
    if c.failed_pids.is_empty() {
        return;
    }
    let exited = SysError(Errno::SRCH).to_string();
    if c.failed_pids.iter().any(|f| f.error != exited) {
        c.status = ContainerStatus::Failed;
        c.reason = Some(
            c.failed_pids
                .iter()
                .map(|f| format!("pid {}: {}", f.pid, f.error))
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
}

/// `/proc/<pid>/maps`: VMA start -> end.
pub fn vma_ends(maps: &str) -> BTreeMap<u64, u64> {
    maps.lines()
        .filter_map(|l| {
            let range = l.split_ascii_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .filter(|(a, b)| a < b)
        .collect()
}

/// The locality part of `koord-applier once -f POD`: `None` when the pod's decision is not
/// `bestEffort`.
pub fn once_locality(
    layout: Layout,
    proc_root: &Path,
    sys_root: &Path,
    config: LocalityConfig,
    view: &PodSpecView,
) -> Option<LocalityReport> {
    pod_locality(view)?;
    let m = Migrator::new(layout, proc_root.to_owned(), sys_root.to_owned(), config);
    Some(m.run_pod(view))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_lists_come_from_their_two_lines_only() {
        let status = b"Name:\tredis\nCpus_allowed:\tf\nCpus_allowed_list:\t0-3\n\
                       Mems_allowed:\t00000003\nMems_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t1\n";
        let set = |s: &str| parse_list(s).expect("list");
        assert_eq!(allowed_lists(status), (Some(set("0-3")), Some(set("0-1"))));
        assert_eq!(allowed_lists(b"Name:\tx\n"), (None, None));
        // Not a list, or above the bound: as if missing.
        assert_eq!(
            allowed_lists(b"Cpus_allowed_list:\tzz\nMems_allowed_list:\t99999999\n"),
            (None, None)
        );
    }
}
