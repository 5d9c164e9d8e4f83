//! The `cpu.idle` fallback on this machine's REAL cgroup v1 `cpu`/`cpuacct` hierarchies.
//!
//! A kubelet-like tree (`kubepods/burstable/pod<LS>/<redis>`, `kubepods/besteffort/pod<BE>/
//! <ffmpeg>`) is made under `/sys/fs/cgroup/{cpu,cpuacct,memory}/koord-idle-test-<pid>-<nanos>/`
//! (a temporary root of symlinks stands in for `/sys/fs/cgroup`). Two busy loops pinned to CPU 0
//! run in the LS and the BE container. Phase 1: nothing applied (both groups at the kernel
//! defaults): the CPU splits about evenly. Phase 2: the applier applies both pods with the
//! fallback on (the plan writes `cpu.idle = 1` on the BE pod) and the node pass sets the
//! besteffort parent's `cpu.idle` from the pods below it; the BE share of CPU 0 (from
//! `cpuacct.usage`) must collapse. Processes are killed and directories removed (leaves first)
//! also on failure. Needs root and cgroup v1 with `cpu.idle`; otherwise ignored (`make unit` runs it with --ignored where the machine has it).
//!
//! Run: `cargo test -p koord-applier --test it -- cpu_idle_real_v1:: --ignored --nocapture`

use crate::common;

use common::real_v1::is_root;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::fixture;
use k8s_openapi::api::core::v1::Pod;
use koord_api::{DecisionSource, ResolvedCpuQos, ResolvedQos, keys};
use koord_applier::node::qos_parents::NodeQos;
use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::layout::{ContainerId, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::plan::NodeCaps;
use koord_translator::pod::spec_view::PodSpecView;

const V1: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 3] = ["cpu", "cpuacct", "memory"];
const SAMPLE: Duration = Duration::from_secs(3);

/// What this machine lacks for these tests, if anything.
fn missing() -> Option<String> {
    if !is_root() {
        return Some("needs root".into());
    }
    if Path::new(V1).join("cgroup.controllers").exists() {
        return Some(format!("{V1} is cgroup v2"));
    }
    for f in ["cpu/cpu.idle", "cpuacct/cpuacct.usage", "memory/tasks"] {
        if !Path::new(V1).join(f).is_file() {
            return Some(format!(
                "no cgroup v1 {V1}/{f} (cpu.idle needs Linux 5.15+)"
            ));
        }
    }
    if Command::new("taskset").arg("-V").output().is_err() {
        return Some("no taskset".into());
    }
    None
}

/// Kills the processes and removes every created directory, deepest first, also on panic.
struct Guard {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
    _root: tempfile::TempDir,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A killed task leaves its cgroup asynchronously: retry rmdir briefly.
        for d in self.dirs.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if d.exists() {
                eprintln!("cleanup: could not remove {}", d.display());
            }
        }
    }
}

fn with_cpu_qos(mut pod: Pod, gi: i64) -> Pod {
    let ann = pod
        .metadata
        .annotations
        .as_mut()
        .expect("annotations")
        .get_mut(keys::ANNOTATION_RESOLVED_QOS)
        .expect("resolved-qos");
    let mut q = ResolvedQos::from_annotation(ann).expect("contract");
    q.cpu_qos = Some(ResolvedCpuQos {
        enabled: true,
        group_identity: gi,
        source: DecisionSource::ClusterConfig,
    });
    *ann = q.to_annotation();
    pod
}

fn usage(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("cpuacct.usage"))
        .expect("cpuacct.usage")
        .trim()
        .parse()
        .expect("number")
}

/// CPU nanoseconds each of `dirs` used over [`SAMPLE`].
fn measure(dirs: [&Path; 2]) -> [u64; 2] {
    let before = dirs.map(usage);
    std::thread::sleep(SAMPLE);
    let after = dirs.map(usage);
    [after[0] - before[0], after[1] - before[1]]
}

fn pct(part: u64, total: u64) -> f64 {
    100.0 * part as f64 / total.max(1) as f64
}

#[test]
#[ignore = "needs root, cgroup v1 with cpu.idle (Linux 5.15+) and taskset"]
fn be_busy_loop_yields_to_ls_with_cpu_idle() {
    let _cpu = common::cpu_measurement();
    common::real_v1::require(
        "root, cgroup v1 with cpu.idle (Linux 5.15+) and taskset",
        missing(),
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("koord-idle-test-{}-{nanos}", std::process::id());
    let tmp = tempfile::tempdir().expect("tmp");
    let mut guard = Guard {
        children: Vec::new(),
        dirs: Vec::new(),
        _root: tempfile::tempdir().expect("placeholder"),
    };
    for c in CONTROLLERS {
        let real = Path::new(V1).join(c).join(&name);
        std::fs::create_dir(&real).expect("mkdir test root");
        guard.dirs.push(real.clone());
        std::os::unix::fs::symlink(&real, tmp.path().join(c)).expect("symlink");
    }
    let layout = Layout::new(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let ls = PodSpecView::from_pod(&with_cpu_qos(fixture("ls-redis.json"), 2)).expect("ls");
    let be = PodSpecView::from_pod(&with_cpu_qos(fixture("be-transcode.json"), -1)).expect("be");
    // The kubelet's and runtime's directories, parents first (removed in reverse).
    let mut leaf = |view: &PodSpecView, container: &str| -> PathBuf {
        let pod_rel = layout.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
        let id = view
            .container(container)
            .and_then(|c| c.container_id.as_deref())
            .map(|id| ContainerId::parse(id).expect("id"))
            .expect("container id");
        let rel = pod_rel.join(layout.container_leaf(&id));
        let mut rels: Vec<PathBuf> = rel.ancestors().map(Path::to_path_buf).collect();
        rels.reverse();
        for c in CONTROLLERS {
            for r in rels.iter().filter(|r| !r.as_os_str().is_empty()) {
                let real = Path::new(V1).join(c).join(&name).join(r);
                if !real.exists() {
                    std::fs::create_dir(&real).expect("mkdir");
                    guard.dirs.push(real);
                }
            }
        }
        rel
    };
    let ls_rel = leaf(&ls, "redis");
    let be_rel = leaf(&be, "ffmpeg");
    // Two busy loops pinned to CPU 0, each moved into its container in cpu and cpuacct.
    for rel in [&ls_rel, &be_rel] {
        let child = Command::new("taskset")
            .args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("spawn busy loop");
        let pid = child.id();
        guard.children.push(child);
        for c in ["cpu", "cpuacct"] {
            let procs = tmp.path().join(c).join(rel).join("cgroup.procs");
            std::fs::write(&procs, format!("{pid}\n")).expect("move pid");
        }
    }
    let acct = |rel: &Path| tmp.path().join("cpuacct").join(rel);
    let (ls_acct, be_acct) = (acct(&ls_rel), acct(&be_rel));
    std::thread::sleep(Duration::from_millis(300));

    let [ls0, be0] = measure([&ls_acct, &be_acct]);
    let be_share0 = pct(be0, ls0 + be0);

    // Through the applier: plan + writer for the pods, the node pass for the QoS parents.
    let caps = NodeCaps {
        bvt_warp_ns: false,
        cpu_idle_fallback: true,
        idle_qos_parents: true,
        cpu_idle: true,
    };
    let applier = Applier::new(layout.clone(), false, None).with_caps(caps);
    let started = Instant::now();
    let r_ls = applier.apply(&ls);
    let r_be = applier.apply(&be);
    let node = NodeQos::new(layout.clone(), false, caps, None, None);
    let nr = node.resync(&[ls.clone(), be.clone()]);
    let applied_in = started.elapsed();
    let be_pod_idle = r_be
        .knobs
        .iter()
        .find(|k| k.file == "cpu.idle")
        .expect("cpu.idle planned for the BE pod");
    assert_eq!(
        (be_pod_idle.new.as_str(), be_pod_idle.outcome),
        ("1", Outcome::Written),
        "{r_be:#?}"
    );
    assert!(
        r_ls.knobs
            .iter()
            .any(|k| k.file == "cpu.idle" && k.new == "0"),
        "{r_ls:#?}"
    );
    assert!(
        !r_be
            .knobs
            .iter()
            .any(|k| k.file == "cpu.shares" && k.target.to_string() == "pod"),
        "no cpu.shares on the idle pod cgroup"
    );
    let cpu_dir = |rel: &Path| layout.dir(rel, Controller::Cpu).expect("dir");
    let be_pod = cpu_dir(&layout.pod_dir(&be.uid, be.kube_qos).expect("pod"));
    let be_parent = cpu_dir(Path::new("kubepods/besteffort"));
    let read = |p: PathBuf| std::fs::read_to_string(&p).expect("read").trim().to_owned();
    assert_eq!(read(be_pod.join("cpu.idle")), "1");
    assert_eq!(read(be_parent.join("cpu.idle")), "1", "{nr:#?}");
    assert_eq!(
        read(cpu_dir(Path::new("kubepods/burstable")).join("cpu.idle")),
        "0"
    );
    assert_eq!(read(cpu_dir(Path::new("kubepods")).join("cpu.idle")), "0");

    let [ls1, be1] = measure([&ls_acct, &be_acct]);
    let be_share1 = pct(be1, ls1 + be1);

    // Idempotent on the real kernel: a second pass writes nothing.
    let again = applier.apply(&be);
    assert_eq!(again.count(Outcome::Written), 0, "{again:#?}");
    let nr2 = node.resync(&[ls.clone(), be.clone()]);
    assert!(nr2.parents.iter().all(|p| p.outcome == Outcome::Unchanged));

    println!(
        "cpu.idle fallback on real cgroup v1 (kernel {}), both loops pinned to CPU 0, {}s samples:",
        read(PathBuf::from("/proc/sys/kernel/osrelease")),
        SAMPLE.as_secs()
    );
    println!(
        "  cpu.idle=0 (defaults):      LS {:.1} ms  BE {:.1} ms  -> BE share {be_share0:.1}%",
        ls0 as f64 / 1e6,
        be0 as f64 / 1e6
    );
    println!(
        "  cpu.idle=1 (via applier):   LS {:.1} ms  BE {:.1} ms  -> BE share {be_share1:.1}%",
        ls1 as f64 / 1e6,
        be1 as f64 / 1e6
    );
    println!("  applier passes took {applied_in:?}");
    assert!(
        (30.0..=70.0).contains(&be_share0),
        "without cpu.idle the two loops share CPU 0: BE {be_share0:.1}%"
    );
    assert!(
        be_share1 < 10.0 && be_share1 < be_share0 / 3.0,
        "with cpu.idle the BE share collapses: {be_share0:.1}% -> {be_share1:.1}%"
    );
    drop(guard);
}
