//! The locality code against this machine's real kernel: the syscall wrapper on real
//! processes (moving pages to the node they are already on succeeds and moves nothing; an
//! exited process is ESRCH), and `koord-applier once` on a real process with the real `/proc`
//! and `/sys`, which on a one-node machine must report MemoryLocalitySkipped "no target numa".

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};

use koord_applier::node::numa::migrate_sys::{
    MPOL_MF_MOVE, SysError, migrate_pages, move_pages, query_pages,
};
use koord_applier::node::numa::numa_maps::NodeUsage;
use koord_applier::node::numa::topology::Topology;
use rustix::io::Errno;

fn require_numa_kernel() {
    assert!(
        Path::new("/proc/self/numa_maps").exists()
            && Path::new("/sys/devices/system/node/node0").exists(),
        "needs a kernel with NUMA (/proc/self/numa_maps, /sys/devices/system/node/node0)"
    );
}

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep")
}

#[test]
#[ignore = "needs a kernel with NUMA (/proc/self/numa_maps, /sys/devices/system/node/node0)"]
fn syscalls_move_nothing_when_pages_are_already_there() {
    require_numa_kernel();
    let me = std::process::id();
    // 64 touched pages of our own heap, page-aligned addresses inside the buffer.
    let mut buf = vec![0u8; 65 * 4096];
    for b in buf.iter_mut().step_by(4096) {
        *b = 1;
    }
    let base = (buf.as_ptr() as u64).div_ceil(4096) * 4096;
    let addrs: Vec<u64> = (0..64).map(|i| base + i * 4096).collect();
    let nodes = query_pages(me, &addrs).expect("move_pages query on our own pages");
    assert!(
        nodes.iter().all(|n| *n >= 0),
        "every touched page is on a node: {nodes:?}"
    );
    let home = nodes[0];
    // Move to where each page already is: success, every status is that node.
    let (not_moved, status) = move_pages(me, &addrs, &nodes, MPOL_MF_MOVE).expect("move_pages");
    assert_eq!(not_moved, 0);
    assert_eq!(status, nodes);
    assert!(
        std::hint::black_box(&buf)
            .iter()
            .step_by(4096)
            .all(|b| *b == 1),
        "data intact"
    );

    // migrate_pages from a node to itself, on ourselves and on a child: nothing left behind.
    let same: BTreeSet<u32> = [home as u32].into_iter().collect();
    let before =
        NodeUsage::parse(std::fs::read_to_string("/proc/self/numa_maps").expect("numa_maps"))
            .expect("parse");
    assert_eq!(migrate_pages(me, &same, &same), Ok(0));
    let after =
        NodeUsage::parse(std::fs::read_to_string("/proc/self/numa_maps").expect("numa_maps"))
            .expect("parse");
    assert_eq!(
        before.pages.keys().collect::<Vec<_>>(),
        after.pages.keys().collect::<Vec<_>>(),
        "no page changed node set"
    );
    let mut child = sleeper();
    let pid = child.id();
    assert_eq!(migrate_pages(pid, &same, &same), Ok(0), "a child process");
    child.kill().expect("kill");
    child.wait().expect("reap");
    // Reaped: the kernel no longer knows the pid.
    assert_eq!(migrate_pages(pid, &same, &same), Err(SysError(Errno::SRCH)));
    assert_eq!(
        migrate_pages(pid, &same, &same)
            .expect_err("gone")
            .to_string(),
        "No such process"
    );
    assert_eq!(query_pages(pid, &[0x1000]), Err(SysError(Errno::SRCH)));
}

#[test]
#[ignore = "needs a kernel with NUMA and one NUMA node with memory"]
fn once_on_this_machine_reports_no_target_numa() {
    let topo = Topology::read(Path::new("/sys")).expect("sysfs");
    assert!(
        topo.is_single_node(),
        "needs one NUMA node with memory; this machine has {}",
        topo.memory.len()
    );
    require_numa_kernel();
    let uid = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
    let cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let dir = tempfile::tempdir().expect("tempdir");
    let cg = dir
        .path()
        .join(format!("cg/kubepods/burstable/pod{uid}/{cid}"));
    std::fs::create_dir_all(&cg).expect("mkdir");
    let mut child = sleeper();
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", child.id())).expect("procs");
    let resolved = r#"{"version":1,"qosClass":"LS","qosClassSource":"label","memoryQOS":{"enabled":false,"policy":"none","source":"default","params":{"minLimitPercent":0,"lowLimitPercent":0,"throttlingPercent":0,"wmarkRatio":95,"wmarkMinAdj":0,"wmarkScalePermill":20,"priority":0,"priorityEnable":0,"oomKillGroup":0},"pod":{"memory.min":0,"memory.low":0},"containers":{}},"memoryLocality":{"policy":"bestEffort","migrateIntervalMinutes":10,"source":"pod-annotation"}}"#;
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "redis-0", "namespace": "shop", "uid": uid,
                     "annotations": {"koordinator.sh/resolved-qos": resolved}},
        "spec": {"containers": [{"name": "redis", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
        "status": {"qosClass": "Burstable", "containerStatuses": [{"name": "redis", "containerID": format!("containerd://{cid}"),
                   "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    });
    let file = dir.path().join("pod.json");
    std::fs::write(&file, pod.to_string()).expect("pod file");
    let once = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
            .args(["--cgroup-root"])
            .arg(dir.path().join("cg"))
            .args([
                "--cgroup-version",
                "v2",
                "--cgroup-driver",
                "cgroupfs",
                "--proc-root",
                "/proc",
                "--sys-root",
                "/sys",
                "once",
            ])
            .args(extra)
            .arg("-f")
            .arg(&file)
            .output()
            .expect("run koord-applier");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "report JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, report)
    };
    let (out, report) = once(&[]);
    let (_, timed) = once(&["--timings"]);
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(report.get("timings").is_none(), "{report:#}");
    assert!(report["locality"].get("timings").is_none(), "{report:#}");
    assert!(
        timed["timings"]["totalMicros"].as_u64() > Some(0),
        "{timed:#}"
    );
    let pass = timed["locality"]["timings"]["passMicros"].as_u64();
    assert!(
        pass.is_some() && pass <= timed["timings"]["localityMicros"].as_u64(),
        "{timed:#}"
    );
    assert!(timed["locality"]["containers"][0]["timings"]["cgroupMicros"].is_u64());
    let loc = &report["locality"];
    assert_eq!(
        loc["event"]["reason"], "MemoryLocalitySkipped",
        "{report:#}"
    );
    assert_eq!(loc["event"]["type"], "Normal");
    assert_eq!(loc["event"]["message"], "no target numa");
    assert_eq!(loc["containers"][0]["name"], "redis");
    assert_eq!(loc["containers"][0]["status"], "skipped");
    assert_eq!(loc["containers"][0]["pids"][0], child.id());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs a kernel with NUMA (/proc/self/numa_maps, /sys/devices/system/node/node0)"]
fn a_zombie_answers_einval_which_the_pass_reports_as_exited() {
    require_numa_kernel();
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    // Wait until it has exited but is not reaped (State: Z).
    let zombie = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    });
    assert!(zombie, "child {pid} never became a zombie");
    let node0: BTreeSet<u32> = [0].into_iter().collect();
    // No mm left: EINVAL, not ESRCH (kernel_migrate_pages, get_task_mm == NULL).
    assert_eq!(
        migrate_pages(pid, &node0, &node0),
        Err(SysError(Errno::INVAL))
    );
    child.wait().expect("reap");
    assert_eq!(
        migrate_pages(pid, &node0, &node0),
        Err(SysError(Errno::SRCH))
    );
}
