//! The applier on this machine's REAL cgroup v1 hierarchy: kubelet-like children are created
//! under `/sys/fs/cgroup/{memory,cpu}/koord-test-<pid>-<nanos>/` and always removed (Drop guard,
//! leaf first). Needs root and v1 memory + cpu controllers; otherwise it prints a loud SKIPPED.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, read};
use koord_applier::apply::Applier;
use koord_applier::cgroup::layout::{ContainerId, Layout};
use koord_applier::cgroup::writer::Outcome;
use koord_applier::cgroup::{CgroupDriver, CgroupVersion};
use koord_applier::podview::PodView;
use koord_applier::report::PodStatus;

const V1: &str = "/sys/fs/cgroup";

/// Removes every created cgroup directory, deepest first, also when the test panics.
struct Cleanup {
    dirs: Vec<PathBuf>,
    _root: tempfile::TempDir,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("cleanup {}: {e}", d.display());
            }
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn usable() -> bool {
    is_root()
        && Path::new(V1).join("memory/memory.limit_in_bytes").is_file()
        && Path::new(V1).join("cpu/cpu.shares").is_file()
        && !Path::new(V1).join("cgroup.controllers").exists()
}

#[test]
fn real_v1_writes_batch_knobs_and_reports_alibaba_knobs_unsupported() {
    if !usable() {
        eprintln!(
            "\n\n*** SKIPPED real_v1_writes_batch_knobs...: needs root + cgroup v1 memory and cpu controllers at {V1} ***\n\n"
        );
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("koord-test-{}-{nanos}", std::process::id());
    // The applier's cgroup root: a temp dir whose memory/ and cpu/ point at our test parents.
    let root = tempfile::tempdir().expect("tmp");
    let mut dirs = Vec::new();
    for c in ["memory", "cpu"] {
        let parent = Path::new(V1).join(c).join(&name);
        std::fs::create_dir(&parent).expect("mkdir test parent");
        dirs.push(parent.clone());
        std::os::unix::fs::symlink(&parent, root.path().join(c)).expect("symlink");
    }
    let mut guard = Cleanup { dirs, _root: root };
    let root_path = guard._root.path().to_owned();
    let layout = Layout::new(&root_path, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let view = PodView::from_pod(&fixture("be-transcode.json")).expect("view");
    let pod_rel = layout.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
    let mut rels = vec![
        PathBuf::from("kubepods"),
        PathBuf::from("kubepods/besteffort"),
        pod_rel.clone(),
    ];
    for c in &view.containers {
        let id = ContainerId::parse(c.container_id.as_deref().expect("id")).expect("valid");
        rels.push(pod_rel.join(layout.container_leaf(&id)));
    }
    for rel in &rels {
        for c in ["memory", "cpu"] {
            let real = Path::new(V1).join(c).join(&name).join(rel);
            std::fs::create_dir(&real).expect("mkdir cgroup");
            guard.dirs.push(real);
        }
    }
    let applier = Applier::new(layout, false, None);
    let r = applier.apply(&view);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    let ff = "1111111111111111111111111111111111111111111111111111111111111111";
    let c = |ctl: &str, file: &str| {
        Path::new(V1)
            .join(ctl)
            .join(&name)
            .join(&pod_rel)
            .join(ff)
            .join(file)
    };
    let p = |ctl: &str, file: &str| {
        Path::new(V1)
            .join(ctl)
            .join(&name)
            .join(&pod_rel)
            .join(file)
    };
    assert_eq!(read(&c("memory", "memory.limit_in_bytes")), "23622320128");
    assert_eq!(read(&c("cpu", "cpu.shares")), "71680");
    assert_eq!(read(&c("cpu", "cpu.cfs_quota_us")), "7000000");
    assert_eq!(read(&p("memory", "memory.limit_in_bytes")), "24696061952");
    assert_eq!(read(&p("cpu", "cpu.shares")), "72192");
    assert_eq!(read(&p("cpu", "cpu.cfs_quota_us")), "7100000");
    // This kernel is mainline: the Alibaba memcg files do not exist.
    let unsupported = applier.unsupported_knobs();
    for k in [
        "memory.wmark_ratio",
        "memory.wmark_scale_factor",
        "memory.wmark_min_adj",
        "memory.priority",
        "memory.use_priority_oom",
    ] {
        assert!(
            unsupported.contains(&k),
            "{k} should be unsupported here: {unsupported:?}"
        );
    }
    eprintln!("real v1: unsupported on this kernel: {unsupported:?}");
    // Idempotent on the real kernel (it reads back what we wrote).
    let again = applier.apply(&view);
    assert_eq!(again.count(Outcome::Written), 0, "{again:#?}");
    // Drift: lower the quota behind our back; the next pass restores it.
    std::fs::write(c("cpu", "cpu.cfs_quota_us"), "50000").expect("drift");
    let fixed = applier.apply(&view);
    assert_eq!(fixed.count(Outcome::Written), 1);
    assert_eq!(read(&c("cpu", "cpu.cfs_quota_us")), "7000000");
    // Someone unlimits memory (-1 reads back as the page-aligned i64::MAX): restored.
    let mut lim = std::fs::OpenOptions::new()
        .write(true)
        .open(c("memory", "memory.limit_in_bytes"))
        .expect("open");
    std::io::Write::write_all(&mut lim, b"-1").expect("unlimit");
    assert_eq!(
        read(&c("memory", "memory.limit_in_bytes")),
        "9223372036854771712"
    );
    let restored = applier.apply(&view);
    assert_eq!(restored.count(Outcome::Written), 1);
    assert_eq!(read(&c("memory", "memory.limit_in_bytes")), "23622320128");
}
