//! Shared test helpers: fixture pods and temporary cgroup trees laid out like a kubelet's.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use koord_applier::config::{CgroupConfig, Config, LogFormat, RunConfig};
use koord_translator::cgroup::layout::{ContainerId, KubeQos, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::spec_view::PodSpecView;

/// The path of a fixture file (`tests/fixtures/<name>`), as the binary's `-f` takes it.
pub fn fixture_path(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> Pod {
    let path = fixture_path(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture file"))
        .expect("fixture pod")
}

/// The fixture with every container ID rewritten to `scheme://<same id>`.
pub fn with_runtime(mut pod: Pod, scheme: &str) -> Pod {
    for cs in pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .into_iter()
        .flatten()
    {
        if let Some(id) = cs.container_id.as_mut() {
            let bare = id
                .split_once("://")
                .map(|(_, b)| b.to_owned())
                .unwrap_or_default();
            *id = format!("{scheme}://{bare}");
        }
    }
    pod
}

/// Which kernel the tree imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Mainline cgroup v2: min/low/high/max/oom.group, cpu.weight/cpu.max.
    MainlineV2,
    /// Alibaba Cloud Linux cgroup v1: the memcg QoS extension files under memory/.
    AlibabaV1,
    /// Mainline cgroup v1: no min/low/high, no wmark, no priority, no oom.group.
    MainlineV1,
}

/// Kernel default contents of the files a cgroup directory has.
pub fn default_files(kernel: Kernel, controller: Controller) -> Vec<(&'static str, &'static str)> {
    match (kernel, controller) {
        (Kernel::MainlineV2, _) => vec![
            ("memory.min", "0"),
            ("memory.low", "0"),
            ("memory.high", "max"),
            ("memory.max", "max"),
            ("memory.oom.group", "0"),
            ("cpu.weight", "100"),
            ("cpu.max", "max 100000"),
        ],
        (Kernel::AlibabaV1, Controller::Memory) => vec![
            ("memory.limit_in_bytes", "9223372036854771712"),
            ("memory.min", "0"),
            ("memory.low", "0"),
            ("memory.high", "9223372036854771712"),
            ("memory.wmark_ratio", "0"),
            ("memory.wmark_high", "9223372036854771712"),
            ("memory.wmark_scale_factor", "50"),
            ("memory.wmark_min_adj", "0"),
            ("memory.priority", "0"),
            ("memory.use_priority_oom", "0"),
            ("memory.oom.group", "0"),
        ],
        (Kernel::MainlineV1, Controller::Memory) => {
            vec![("memory.limit_in_bytes", "9223372036854771712")]
        }
        (_, Controller::Cpu) => vec![
            ("cpu.shares", "1024"),
            ("cpu.cfs_quota_us", "-1"),
            ("cpu.cfs_period_us", "100000"),
        ],
        // The trees seed the memory and cpu controllers only.
        (
            _,
            Controller::Cpuset | Controller::Cpuacct | Controller::PerfEvent | Controller::Unified,
        ) => Vec::new(),
    }
}

/// The memory directories of `kubepods` and the two QoS-class directories, relative to the
/// memory hierarchy (`kubepods/burstable`, or the systemd slices).
pub fn ancestor_dirs(layout: &Layout) -> [PathBuf; 3] {
    [
        layout.qos_parent_dir(KubeQos::Burstable),
        layout.qos_parent_dir(KubeQos::BestEffort),
        layout.kubepods_dir(),
    ]
    .map(|rel| layout.dir(&rel, Controller::Memory).expect("dir"))
}

/// The kubelet's `kubepods` and QoS-class directories with the kernel's default memory files
/// (those already there are left as they are).
pub fn make_ancestors(layout: &Layout, kernel: Kernel) {
    for dir in ancestor_dirs(layout) {
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (file, value) in default_files(kernel, Controller::Memory) {
            let path = dir.join(file);
            if file.starts_with("memory.") && !path.exists() {
                std::fs::write(path, format!("{value}\n")).expect("seed");
            }
        }
    }
}

/// Creates the pod's and its containers' directories (as the kubelet and runtime would) with
/// the kernel's default files, below the kubelet's `kubepods` and QoS-class directories (see
/// [`make_ancestors`]); returns every pod and container directory made.
pub fn make_pod_tree(layout: &Layout, kernel: Kernel, view: &PodSpecView) -> Vec<PathBuf> {
    make_ancestors(layout, kernel);
    let pod_rel = layout.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
    let mut rels = vec![pod_rel.clone()];
    for c in &view.containers {
        if let Some(id) = c.container_id.as_deref() {
            let id = ContainerId::parse(id).expect("container id");
            rels.push(pod_rel.join(layout.container_leaf(&id)));
        }
    }
    let controllers: &[Controller] = match layout.version {
        CgroupVersion::V1 => &[Controller::Memory, Controller::Cpu],
        CgroupVersion::V2 => &[Controller::Memory],
    };
    let mut dirs = Vec::new();
    for rel in rels {
        for c in controllers {
            let dir = layout.dir(&rel, *c).expect("dir");
            std::fs::create_dir_all(&dir).expect("mkdir");
            for (file, value) in default_files(kernel, *c) {
                std::fs::write(dir.join(file), format!("{value}\n")).expect("seed");
            }
            dirs.push(dir);
        }
    }
    if layout.version == CgroupVersion::V2 {
        std::fs::write(layout.root.join("cgroup.controllers"), "cpu memory\n").expect("marker");
    }
    dirs
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

pub fn layout(root: &Path, version: CgroupVersion, driver: CgroupDriver) -> Layout {
    Layout::new(root, version, driver)
}

/// Every file under `root`, with its content: to prove a refused pod changed nothing.
pub fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("readdir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}
pub mod collectors;
pub mod fake_api;
pub mod real_v1;

/// Held by the machine tests that run busy loops on the real hierarchy and measure CPU time.
/// Each was a test binary of its own, and binaries run one after another; in one test process
/// one test's spinners would be another's load.
pub fn cpu_measurement() -> std::sync::MutexGuard<'static, ()> {
    static CPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The lines a kernel's `/proc/stat` has after the CPU lines (the parser requires them).
pub const PROC_STAT_TAIL: &str =
    "intr 0\nctxt 0\nbtime 0\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 0\n";

/// A kernel-shaped `/proc/meminfo` with `total` and `available` bytes (the other required
/// fields zero).
pub fn meminfo(total: u64, available: u64) -> String {
    let mut text = format!(
        "MemTotal: {} kB\nMemFree: {} kB\nMemAvailable: {} kB\n",
        total / 1024,
        available / 1024,
        available / 1024
    );
    for field in [
        "Buffers",
        "Cached",
        "SwapCached",
        "Active",
        "Inactive",
        "SwapTotal",
        "SwapFree",
        "Dirty",
        "Writeback",
        "Mapped",
        "Slab",
        "Committed_AS",
        "VmallocTotal",
        "VmallocUsed",
        "VmallocChunk",
    ] {
        text.push_str(&format!("{field}: 0 kB\n"));
    }
    text
}

/// The settings for a v2 tree under `root` (never the host's /proc, /sys or resctrl beyond
/// reading), every feature at its default: tests change the fields they exercise. `run` takes
/// its own section beside it ([`watch_settings`]).
pub fn run_config(root: &Path, driver: CgroupDriver) -> Config {
    Config {
        cgroup: CgroupConfig {
            root: root.to_owned(),
            version: Some(CgroupVersion::V2),
            driver: Some(driver),
            kubelet_root: None,
        },
        proc_root: "/proc".into(),
        sys_root: "/sys".into(),
        locality: Default::default(),
        collectors: koord_applier::node::collectors::CollectorConfig::disabled(),
        dry_run: false,
        log_format: LogFormat::Text,
        cpu_idle_fallback: false,
        cpu_idle_qos_parents: false,
        // Never the host's /sys/fs/resctrl in tests.
        resctrl_root: root.join("no-resctrl"),
        ancestors: Default::default(),
        systemd: Default::default(),
    }
}

/// The watch loop's settings: resync far away (a test drives lists and watches, not the
/// timer), metrics on an ephemeral port unless the test needs a known one.
pub fn watch_settings(node: &str, metrics_addr: std::net::SocketAddr) -> RunConfig {
    RunConfig {
        node_name: node.into(),
        resync: std::time::Duration::from_secs(3600),
        ancestors_check: None,
        metrics_addr,
        event_window: std::time::Duration::from_secs(600),
        colocation: Default::default(),
        endpoint: Default::default(),
        nri: Default::default(),
        reclaim: Default::default(),
        proactive: Default::default(),
        be_swap: Default::default(),
    }
}

/// `ls-redis.json` with a resolved-qos whose `memory.high` (999999999999) is above the pod's
/// limit, written as JSON into `dir`: the pod every refusal test feeds the applier.
pub fn forged_pod_file(dir: &Path) -> PathBuf {
    let mut pod = fixture("ls-redis.json");
    let ann = pod.metadata.annotations.as_mut().expect("annotations");
    let forged = ann["koordinator.sh/resolved-qos"].replacen(
        "\"memory.high\":83886080",
        "\"memory.high\":999999999999",
        1,
    );
    ann.insert("koordinator.sh/resolved-qos".into(), forged);
    let file = dir.join("forged.json");
    std::fs::write(&file, serde_json::to_vec(&pod).expect("json")).expect("write");
    file
}
