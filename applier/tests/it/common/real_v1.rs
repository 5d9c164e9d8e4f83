//! A kubelet-like pod tree on this machine's REAL cgroup v1 hierarchy, for the tests that need
//! the kernel's own answers. Everything is created under a unique
//! `/sys/fs/cgroup/{memory,cpu}/<prefix>-<pid>-<nanos>/` parent and removed when the guard
//! drops (deepest first), also when the test panics.

use std::path::{Path, PathBuf};

use koord_translator::cgroup::layout::{ContainerId, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

pub const V1: &str = "/sys/fs/cgroup";

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Root, a v1 (not unified) hierarchy, and the memory and cpu controllers' files.
pub fn usable() -> bool {
    is_root()
        && Path::new(V1).join("memory/memory.limit_in_bytes").is_file()
        && Path::new(V1).join("cpu/cpu.cfs_quota_us").is_file()
        && !Path::new(V1).join("cgroup.controllers").exists()
}

/// Panics with what the test needs when this machine lacks it: these tests are
/// `#[ignore = "needs ..."]` and run with `--ignored` only where the machine has it.
pub fn require_usable() {
    assert!(
        usable(),
        "needs root and the cgroup v1 memory and cpu controllers at {V1}"
    );
}

/// Panics with `needs {what}: {why}` when `missing` says what is absent.
pub fn require(what: &str, missing: Option<String>) {
    if let Some(why) = missing {
        panic!("needs {what}: {why}");
    }
}

/// The test's cgroups; removed deepest first on drop.
pub struct RealV1Tree {
    /// The unique parent's name under each controller.
    pub name: String,
    /// The applier's cgroup root: a temp dir whose `memory/` and `cpu/` link to the parents.
    pub layout: Layout,
    dirs: Vec<PathBuf>,
    _root: tempfile::TempDir,
}

impl RealV1Tree {
    /// Creates `kubepods`, `kubepods/besteffort`, the pod and its containers' directories for
    /// `view` (a BestEffort pod) under both controllers.
    pub fn for_pod(prefix: &str, view: &PodSpecView) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("{prefix}-{}-{nanos}", std::process::id());
        let root = tempfile::tempdir().expect("tmp");
        let mut dirs = Vec::new();
        for c in ["memory", "cpu"] {
            let parent = Path::new(V1).join(c).join(&name);
            std::fs::create_dir(&parent).expect("mkdir test parent");
            dirs.push(parent.clone());
            std::os::unix::fs::symlink(&parent, root.path().join(c)).expect("symlink");
        }
        let layout = Layout::new(root.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let mut tree = RealV1Tree {
            name,
            layout,
            dirs,
            _root: root,
        };
        let pod_rel = tree
            .layout
            .pod_dir(&view.uid, view.kube_qos)
            .expect("pod dir");
        let mut rels = vec![
            PathBuf::from("kubepods"),
            PathBuf::from("kubepods/besteffort"),
            pod_rel.clone(),
        ];
        for c in &view.containers {
            let id = ContainerId::parse(c.container_id.as_deref().expect("id")).expect("valid");
            rels.push(pod_rel.join(tree.layout.container_leaf(&id)));
        }
        for rel in &rels {
            for c in ["memory", "cpu"] {
                let real = tree.controller_dir(c).join(rel);
                std::fs::create_dir(&real).expect("mkdir cgroup");
                tree.dirs.push(real);
            }
        }
        tree
    }

    /// The real directory of the test parent under `controller`.
    pub fn controller_dir(&self, controller: &str) -> PathBuf {
        Path::new(V1).join(controller).join(&self.name)
    }
}

impl Drop for RealV1Tree {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("cleanup {}: {e}", d.display());
            }
        }
    }
}
