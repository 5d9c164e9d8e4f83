//! Locality passes on temporary `/sys`, `/proc` and cgroup trees: target selection from
//! cpuset or Cpus_allowed_list, measurement from numa_maps, the real syscalls against a PID
//! that cannot exist (so "No such process" is the kernel's own answer), and the Event text.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::numa::LocalityConfig;
use koord_applier::node::numa::locality::{Migrator, container_cgroup, pod_locality};
use koord_applier::node::numa::report::{ContainerStatus, LocalityReport, Method};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// Above any pid_max (at most 2^22): the kernel answers ESRCH.
const GONE: u32 = 2_000_000_000;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn pod(locality: &str, started: bool) -> PodSpecView {
    let resolved = format!(
        r#"{{"version":1,"qosClass":"LS","qosClassSource":"label","memoryQOS":{{"enabled":false,"policy":"none","source":"default","params":{{"minLimitPercent":0,"lowLimitPercent":0,"throttlingPercent":0,"wmarkRatio":95,"wmarkMinAdj":0,"wmarkScalePermill":20,"priority":0,"priorityEnable":0,"oomKillGroup":0}},"pod":{{"memory.min":0,"memory.low":0}},"containers":{{}}}}{locality}}}"#
    );
    let statuses = if started {
        serde_json::json!([{"name": "app", "containerID": format!("containerd://{CID}"), "image": "", "imageID": "", "ready": true, "restartCount": 0}])
    } else {
        serde_json::json!([])
    };
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "redis-0", "namespace": "shop", "uid": UID,
                     "annotations": {"koordinator.sh/resolved-qos": resolved}},
        "spec": {"containers": [{"name": "app"}]},
        "status": {"qosClass": "Burstable", "containerStatuses": statuses}
    }))
    .expect("pod");
    PodSpecView::from_pod(&p).expect("view")
}

const BEST_EFFORT: &str = r#","memoryLocality":{"policy":"bestEffort","source":"pod-annotation"}"#;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    layout: Layout,
}

impl Tree {
    fn new(version: CgroupVersion, nodes: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_owned();
        for (i, cpus) in nodes.iter().enumerate() {
            write(
                &root.join(format!("sys/devices/system/node/node{i}/cpulist")),
                &format!("{cpus}\n"),
            );
        }
        let layout = Layout::new(root.join("cg"), version, CgroupDriver::Cgroupfs);
        Self {
            _dir: dir,
            root,
            layout,
        }
    }

    fn migrator(&self, config: LocalityConfig) -> Migrator {
        Migrator::new(
            self.layout.clone(),
            self.root.join("proc"),
            self.root.join("sys"),
            config,
        )
    }

    /// The container cgroup with `pids` and (when given) `cpuset.cpus`.
    fn container(&self, pids: &[u32], cpuset: Option<&str>) {
        let cg = container_cgroup(
            &self.layout,
            &pod(BEST_EFFORT, true),
            &format!("containerd://{CID}"),
        )
        .expect("cgroup path");
        let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
        write(&cg.procs_dir.join("cgroup.procs"), &procs);
        if let Some(c) = cpuset {
            write(&cg.cpuset_dir.join("cpuset.cpus"), &format!("{c}\n"));
        }
    }

    fn process(&self, pid: u32, numa_maps: &str, cpus_allowed: &str, mems_allowed: &str) {
        let dir = self.root.join(format!("proc/{pid}"));
        write(&dir.join("numa_maps"), numa_maps);
        write(
            &dir.join("status"),
            &status_text(pid, cpus_allowed, mems_allowed),
        );
        write(
            &dir.join("maps"),
            "7f0000000000-7f0000190000 rw-p 00000000 00:00 0 \n7f1000000000-7f1000001000 rw-p 00000000 00:00 0 \n",
        );
    }
}

/// A `/proc/<pid>/status` shaped like the kernel's (the fields every kernel prints).
fn status_text(pid: u32, cpus_allowed: &str, mems_allowed: &str) -> String {
    format!(
        "Name:\tredis\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n\
         TracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t \n\
         VmRSS:\t    1764 kB\nThreads:\t1\nSigQ:\t0/96365\nSigPnd:\t0000000000000000\n\
         ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n\
         SigCgt:\t0000000000000000\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
         CapEff:\t0000000000000000\nCpus_allowed:\tf\nCpus_allowed_list:\t{cpus_allowed}\n\
         Mems_allowed:\t00000003\nMems_allowed_list:\t{mems_allowed}\n"
    )
}

/// 300 pages on node 0 and 100 on node 1.
const MAPS: &str = "7f0000000000 default anon=400 dirty=400 N0=300 N1=100 kernelpagesize_kB=4\n7f1000000000 default\n";

fn message(r: &LocalityReport) -> (&'static str, &'static str, String) {
    let ev = r.event.as_ref().expect("an event");
    (ev.kind, ev.reason, ev.message.clone())
}

#[test]
fn remote_pages_of_an_exited_process_are_reported_not_fatal() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    t.container(&[GONE], Some("2-3"));
    t.process(GONE, MAPS, "0-3", "0-1");
    for config in [
        LocalityConfig::default(),
        LocalityConfig {
            max_pages_per_second: Some(1000),
        },
    ] {
        let r = t.migrator(config).run_pod(&pod(BEST_EFFORT, true));
        let c = &r.containers[0];
        assert_eq!(c.status, ContainerStatus::Completed, "{c:?}");
        assert_eq!(
            c.method,
            Some(if config.max_pages_per_second.is_some() {
                Method::MovePages
            } else {
                Method::MigratePages
            })
        );
        let before = c.before.as_ref().expect("measured");
        assert_eq!(
            (before.remote_pages, before.local_ratio_percent()),
            (300, 25)
        );
        assert_eq!(c.pages_migrated, 0, "the process is gone: nothing moved");
        assert!(!r.failed());
        assert_eq!(
            message(&r),
            (
                "Normal",
                "MemoryLocalityCompleted",
                format!(
                    "Container app completed: failed to migrate the following processes: \
                     failed pid: {GONE}, error: No such process,from remote numa: 0 to local numa: 1\n\
                     Total: 1 container(s) completed, 0 failed, 0 skipped; cur local memory ratio 25, rest remote memory pages 300"
                )
            )
        );
    }
}

#[test]
fn cpus_allowed_list_is_the_fallback_and_mems_allowed_restricts() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    // No cpuset file: the process's Cpus_allowed_list (node 0) decides.
    t.container(&[GONE], None);
    t.process(GONE, MAPS, "0-1", "0-1");
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    let c = &r.containers[0];
    assert_eq!(
        (
            c.local_nodes.iter().copied().collect::<Vec<_>>(),
            c.remote_nodes.iter().copied().collect::<Vec<_>>()
        ),
        (vec![0], vec![1])
    );
    assert_eq!(c.before.as_ref().expect("measured").remote_pages, 100);
    // Its memory may only be on node 1: node 0 is not a target, nothing to do.
    t.process(GONE, MAPS, "0-1", "1");
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    assert_eq!(
        message(&r),
        (
            "Normal",
            "MemoryLocalitySkipped",
            "no target numa".to_owned()
        )
    );
}

#[test]
fn no_target_numa_cases() {
    // One node.
    let t = Tree::new(CgroupVersion::V2, &["0-3"]);
    t.container(&[GONE], Some("0-1"));
    t.process(GONE, MAPS, "0-3", "0");
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    assert_eq!(
        message(&r),
        (
            "Normal",
            "MemoryLocalitySkipped",
            "no target numa".to_owned()
        )
    );
    assert_eq!(r.containers[0].reason.as_deref(), Some("no target numa"));
    // Two nodes, cpuset across both.
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    t.container(&[GONE], Some("1-2"));
    t.process(GONE, MAPS, "0-3", "0-1");
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    assert_eq!(
        message(&r),
        (
            "Normal",
            "MemoryLocalitySkipped",
            "no target numa".to_owned()
        )
    );
    // No process in the container.
    t.container(&[], Some("0"));
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    assert_eq!(
        message(&r),
        (
            "Normal",
            "MemoryLocalitySkipped",
            "no running process".to_owned()
        )
    );
}

#[test]
fn already_local_moves_nothing() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    t.container(&[GONE], Some("0"));
    t.process(
        GONE,
        "1000 default anon=5 N0=5 kernelpagesize_kB=4\n",
        "0-3",
        "0-1",
    );
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    let c = &r.containers[0];
    assert_eq!(c.method, None, "no syscall when nothing is remote");
    assert!(c.failed_pids.is_empty());
    // Nothing moved: the one reading is both before and after (numa_maps is read once).
    assert_eq!(c.before, c.after);
    assert_eq!(
        c.timings.expect("timed").numa_maps_after_micros,
        0,
        "no second numa_maps reading"
    );
    assert_eq!(
        message(&r).2,
        "Container app completed: migrated memory from remote numa: 1 to local numa: 0\n\
         Total: 1 container(s) completed, 0 failed, 0 skipped; cur local memory ratio 100, rest remote memory pages 0"
    );
}

#[test]
fn cgroup_v1_reads_the_cpuset_controller() {
    let t = Tree::new(CgroupVersion::V1, &["0-1", "2-3"]);
    t.container(&[GONE], Some("3"));
    t.process(GONE, MAPS, "0-3", "0-1");
    let cg = container_cgroup(
        &t.layout,
        &pod(BEST_EFFORT, true),
        &format!("containerd://{CID}"),
    )
    .expect("path");
    assert!(
        cg.cpuset_dir
            .starts_with(t.root.join("cg/cpuset/kubepods/burstable")),
        "{cg:?}"
    );
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    assert_eq!(
        r.containers[0]
            .local_nodes
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![1]
    );
}

#[test]
fn missing_cgroup_fails_with_the_error() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    let (kind, reason, msg) = message(&r);
    assert_eq!((kind, reason), ("Warning", "MemoryLocalityFailed"));
    assert!(r.failed());
    let path = t
        .root
        .join(format!("cg/kubepods/burstable/pod{UID}/{CID}/cgroup.procs"));
    assert_eq!(
        msg,
        format!(
            "Container app failed: read {}: No such file or directory (os error 2)\nTotal: 0 container(s) completed, 1 failed, 0 skipped",
            path.display()
        )
    );
}

#[test]
fn only_best_effort_started_containers() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, false));
    assert!(
        r.containers.is_empty() && r.event.is_none(),
        "not started: nothing"
    );
    assert!(pod_locality(&pod(BEST_EFFORT, true)).is_some());
    assert!(
        pod_locality(&pod(
            r#","memoryLocality":{"policy":"none","source":"pod-annotation"}"#,
            true
        ))
        .is_none()
    );
    assert!(pod_locality(&pod("", true)).is_none());
}

#[test]
fn every_pass_is_timed_and_the_default_report_leaves_it_out() {
    let t = Tree::new(CgroupVersion::V2, &["0-1", "2-3"]);
    t.container(&[GONE], Some("2-3"));
    t.process(GONE, MAPS, "0-3", "0-1");
    let r = t
        .migrator(LocalityConfig::default())
        .run_pod(&pod(BEST_EFFORT, true));
    let pass = r.timings.expect("the pass is timed");
    let c = r.containers[0].timings.expect("the container is timed");
    let phases = pass.topology_micros
        + c.cgroup_micros
        + c.numa_maps_before_micros
        + c.migrate_micros
        + c.numa_maps_after_micros;
    assert!(
        phases <= pass.pass_micros,
        "the phases ({phases} us) fit in the pass ({} us)",
        pass.pass_micros
    );
    assert_eq!(c.migrate_micros, r.containers[0].migrate_micros);
    let timed = serde_json::to_string(&r).expect("json");
    assert!(timed.contains("\"passMicros\"") && timed.contains("\"numaMapsBeforeMicros\""));
    let plain = serde_json::to_string(&r.without_timings()).expect("json");
    assert!(!plain.contains("timings"), "{plain}");
}
