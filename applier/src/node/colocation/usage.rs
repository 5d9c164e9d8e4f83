//! Reads CPU and memory usage: per cgroup (v1 `cpuacct.usage` and `memory.usage_in_bytes` minus
//! `total_inactive_file`; v2 `cpu.stat usage_usec` and `memory.current` minus `inactive_file`)
//! and for the whole node (`/proc/stat`, `/proc/meminfo` below `--proc-root`).
//!
//! CPU is a cumulative counter in nanoseconds; [`super::window`] turns counters into rates.
//! Memory excludes inactive page cache, as the kubelet's working set and Koordinator do: clean
//! cache is reclaimable and lending it is safe.

use std::fs;
use std::io;
use std::path::Path;

use procfs_core::{ExplicitSystemInfo, FromRead as _, FromReadSI as _, KernelStats, Meminfo};

use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::{Layout, LayoutError};
use koord_translator::cgroup::{CgroupVersion, Controller};

/// One reading of a cgroup or of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Cumulative CPU time in nanoseconds.
    pub cpu_ns: u64,
    /// Memory in use now, in bytes (without inactive file cache).
    pub memory_bytes: u64,
}

/// `USER_HZ`: the unit of `/proc/stat`. 100 on every Linux architecture Kubernetes runs on
/// (the kernel's userspace ABI fixes it, independently of `CONFIG_HZ`).
pub const USER_HZ: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot parse {what}")]
    Parse { path: String, what: &'static str },
    /// A `/proc` file `procfs` refused, with its reason (a real kernel prints every line it needs).
    #[error("{path}: cannot parse {what}: {detail}")]
    Procfs {
        path: String,
        what: &'static str,
        detail: String,
    },
    /// A cgroup file, read through `cgroup::file` (the error names the path).
    #[error(transparent)]
    Cgroup(io::Error),
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

impl UsageError {
    /// The cgroup (or file) does not exist: a pod that is starting or gone.
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Io { source, .. } | Self::Cgroup(source) => {
                source.kind() == io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}

fn read(path: &Path) -> Result<String, UsageError> {
    fs::read_to_string(path).map_err(|source| UsageError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A cgroup file; absent is a `NotFound` error (a pod that is starting or gone).
fn read_cg(path: &Path) -> Result<String, UsageError> {
    file::read_existing(path).map_err(UsageError::Cgroup)
}

fn parse_u64(path: &Path, text: &str, what: &'static str) -> Result<u64, UsageError> {
    text.trim().parse().map_err(|_| UsageError::Parse {
        path: path.display().to_string(),
        what,
    })
}

/// The value of `key` in a cgroup `key value` file (`memory.stat`, `cpu.stat`).
pub fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let k = it.next()?.trim_end_matches(':');
        (k == key).then(|| it.next()?.parse().ok())?
    })
}

/// Reads one cgroup (`rel` below the hierarchy root, e.g. a pod dir from [`Layout::pod_dir`]).
pub fn read_cgroup(layout: &Layout, rel: &Path) -> Result<Reading, UsageError> {
    match layout.version {
        CgroupVersion::V1 => {
            let acct = layout.dir(rel, Controller::Cpuacct)?.join("cpuacct.usage");
            let cpu_ns = parse_u64(&acct, &read_cg(&acct)?, "cpuacct.usage")?;
            let mem = layout.dir(rel, Controller::Memory)?;
            let usage_file = mem.join("memory.usage_in_bytes");
            let usage = parse_u64(&usage_file, &read_cg(&usage_file)?, "memory.usage_in_bytes")?;
            let stat_file = mem.join("memory.stat");
            let inactive = stat_field(&read_cg(&stat_file)?, "total_inactive_file").unwrap_or(0);
            Ok(Reading {
                cpu_ns,
                memory_bytes: usage.saturating_sub(inactive),
            })
        }
        CgroupVersion::V2 => {
            let dir = layout.dir(rel, Controller::Memory)?;
            let cpu_file = dir.join("cpu.stat");
            let usec = stat_field(&read_cg(&cpu_file)?, "usage_usec").ok_or_else(|| {
                UsageError::Parse {
                    path: cpu_file.display().to_string(),
                    what: "usage_usec",
                }
            })?;
            let cur_file = dir.join("memory.current");
            let current = parse_u64(&cur_file, &read_cg(&cur_file)?, "memory.current")?;
            let inactive =
                stat_field(&read_cg(&dir.join("memory.stat"))?, "inactive_file").unwrap_or(0);
            Ok(Reading {
                cpu_ns: usec.saturating_mul(1000),
                memory_bytes: current.saturating_sub(inactive),
            })
        }
    }
}

/// The node: busy CPU time from the aggregate `cpu` line of `/proc/stat` (user, nice, system,
/// irq, softirq and steal; idle and iowait are not busy, guest time is already inside user) and
/// `MemTotal - MemAvailable` from `/proc/meminfo` (what koordlet reports as node memory used),
/// both parsed by `procfs`.
pub fn read_node(proc_root: &Path) -> Result<Reading, UsageError> {
    let stat_path = proc_root.join("stat");
    let stat = read(&stat_path)?;
    let jiffies = proc_stat_busy(&stat).map_err(|detail| UsageError::Procfs {
        path: stat_path.display().to_string(),
        what: "the cpu line",
        detail,
    })?;
    let mem_path = proc_root.join("meminfo");
    let meminfo = read(&mem_path)?;
    let procfs_error = |detail: String| UsageError::Procfs {
        path: mem_path.display().to_string(),
        what: "MemTotal/MemAvailable",
        detail,
    };
    let parsed = Meminfo::from_read(meminfo.as_bytes()).map_err(|e| procfs_error(e.to_string()))?;
    let (total, avail) = match parsed.mem_available {
        Some(avail) => (parsed.mem_total, avail),
        None => return Err(procfs_error("no MemAvailable line".into())),
    };
    Ok(Reading {
        cpu_ns: jiffies.saturating_mul(1_000_000_000 / USER_HZ),
        memory_bytes: total.saturating_sub(avail),
    })
}

/// `/proc/stat`'s unit is `USER_HZ` whatever the node's clock: what `procfs` is told.
const PROC_STAT_INFO: ExplicitSystemInfo = ExplicitSystemInfo {
    boot_time_secs: 0,
    ticks_per_second: USER_HZ,
    page_size: 4096,
    is_little_endian: cfg!(target_endian = "little"),
};

/// Busy jiffies of the aggregate `cpu` line of a whole `/proc/stat`; `None` when the file does
/// not parse or the line lacks irq, softirq or steal.
pub fn parse_proc_stat_busy(stat: &str) -> Option<u64> {
    proc_stat_busy(stat).ok()
}

/// [`parse_proc_stat_busy`] with the reason it failed.
fn proc_stat_busy(stat: &str) -> Result<u64, String> {
    let t = KernelStats::from_read(stat.as_bytes(), &PROC_STAT_INFO)
        .map_err(|e| e.to_string())?
        .total;
    let (Some(irq), Some(softirq), Some(steal)) = (t.irq, t.softirq, t.steal) else {
        return Err("the cpu line lacks irq, softirq or steal (Linux < 2.6.11)".into());
    };
    Ok(t.user + t.nice + t.system + irq + softirq + steal)
}

/// The online CPUs listed in `/proc/stat` (`cpuN` lines). Read by hand: `procfs` keeps the
/// lines' times but not their CPU numbers, and the cpuset policy needs the numbers.
pub fn online_cpus(proc_root: &Path) -> Result<Vec<u32>, UsageError> {
    let path = proc_root.join("stat");
    let stat = read(&path)?;
    let mut cpus: Vec<u32> = stat
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect();
    cpus.sort_unstable();
    if cpus.is_empty() {
        return Err(UsageError::Parse {
            path: path.display().to_string(),
            what: "cpuN lines",
        });
    }
    Ok(cpus)
}
