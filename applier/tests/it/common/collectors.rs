//! Helpers for the collector tests: pods, temporary and real cgroup v2 trees, machine checks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::collectors::Collector;
use koord_runtime::metrics::render;
use prometheus::Registry;

pub const UNIFIED: &str = "/sys/fs/cgroup/unified";

/// A Burstable pod with containerd containers `(name, 64-hex id)`.
pub fn pod(uid: &str, name: &str, containers: &[(&str, &str)], rv: &str) -> Pod {
    let specs: Vec<_> = containers
        .iter()
        .map(|(n, _)| serde_json::json!({"name": n, "image": "x", "resources": {"requests": {"memory": "64Mi"}}}))
        .collect();
    let statuses: Vec<_> = containers
        .iter()
        .map(|(n, id)| {
            serde_json::json!({"name": n, "containerID": format!("containerd://{id}"),
            "image": "x", "imageID": "", "ready": true, "restartCount": 0})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": rv},
        "spec": {"nodeName": "node-a", "containers": specs},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": statuses}
    }))
    .expect("pod json")
}

/// The `/metrics` text of `registry` with the collector's own series appended.
pub fn scrape(registry: &Registry, c: &Collector) -> String {
    let mut t = render(registry);
    c.render_text(&mut t);
    t
}

/// A 64-hex container id from a small number.
pub fn cid(n: u32) -> String {
    format!("{n:064x}")
}

/// What this machine lacks for the real cgroup v2 tests (root, a cgroup v2 hierarchy at
/// /sys/fs/cgroup/unified that has PSI files), if anything.
pub fn unified_psi_missing() -> Option<String> {
    if !super::real_v1::is_root() {
        return Some("not root".into());
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if !mounts.lines().any(|l| {
        l.split_whitespace().nth(1) == Some(UNIFIED)
            && l.split_whitespace().nth(2) == Some("cgroup2")
    }) {
        return Some(format!("no cgroup2 mount at {UNIFIED}"));
    }
    if !Path::new(UNIFIED).join("cpu.pressure").is_file() {
        return Some(format!(
            "{UNIFIED} has no PSI files (kernel without CONFIG_PSI or psi=0)"
        ));
    }
    None
}

/// The `#[ignore]` reason of the tests that need [`unified_psi_missing`] to be `None`.
pub const NEEDS_UNIFIED_PSI: &str = "root and cgroup v2 at /sys/fs/cgroup/unified with PSI files";

/// Panics with what the test needs when this machine lacks it.
pub fn require_unified_psi() {
    super::real_v1::require(NEEDS_UNIFIED_PSI, unified_psi_missing());
}

/// A real cgroup v2 subtree `/sys/fs/cgroup/unified/koord-test-<rand>/...`, removed on drop
/// (processes moved back to the root, leaves first).
pub struct RealTree {
    pub root: PathBuf,
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

impl RealTree {
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let root = Path::new(UNIFIED).join(format!("koord-test-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&root).expect("mkdir test cgroup");
        Self {
            dirs: vec![root.clone()],
            root,
            children: Vec::new(),
        }
    }

    /// Creates `rel` (and its parents) below the root.
    pub fn mkdir(&mut self, rel: &Path) -> PathBuf {
        let mut p = self.root.clone();
        for c in rel.components() {
            p.push(c);
            if !p.is_dir() {
                std::fs::create_dir(&p).expect("mkdir cgroup");
                self.dirs.push(p.clone());
            }
        }
        p
    }

    /// Starts a busy shell loop inside the cgroup `dir`.
    pub fn spawn_busy(&mut self, dir: &Path) -> u32 {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn busy loop");
        let pid = child.id();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).expect("move into cgroup");
        self.children.push(child);
        pid
    }
}

impl Drop for RealTree {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = std::fs::write(Path::new(UNIFIED).join("cgroup.procs"), c.id().to_string());
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in self.dirs.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// The metric lines of the families starting with `prefix`, sorted.
pub fn series(text: &str, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}
