//! Colocation on temporary trees laid out like a kubelet's cgroupfs tree (v1 and v2) with a
//! synthetic `--proc-root`: usage readings, the capacity input over the window, and the BE
//! parent writes of both suppression policies, including lifting.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use koord_applier::node::colocation::capacity::{Resources, batch_capacity};
use koord_applier::node::colocation::config::{
    ColocationConfig, SuppressPolicy, ThresholdStrategy,
};
use koord_applier::node::colocation::engine::Engine;
use koord_applier::node::colocation::pod_facts::PodFacts;
use koord_applier::node::colocation::suppress::Limit;
use koord_applier::node::colocation::usage::{read_cgroup, read_node};
use koord_translator::cgroup::layout::{KubeQos, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

const GI: u64 = 1 << 30;
const LS: &str = "11111111-2222-4333-8444-555555555555";
const BE: &str = "bbbbbbbb-2222-4333-8444-555555555555";
const NEW: &str = "aaaaaaaa-2222-4333-8444-555555555555";

fn put(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn get(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read").trim().to_owned()
}

fn facts(uid: &str, qos: KubeQos, be: bool, request: Resources) -> PodFacts {
    PodFacts {
        uid: uid.into(),
        namespace: "ns".into(),
        name: uid[..4].into(),
        kube_qos: qos,
        be,
        request,
        batch_request: Resources::ZERO,
    }
}

/// `/proc/stat` with `busy` jiffies on `cpus` CPUs and `/proc/meminfo` with `used` bytes of 16 GiB.
fn write_proc(dir: &Path, busy: u64, used: u64, cpus: usize) {
    let mut stat = format!("cpu  {busy} 0 0 100000 0 0 0 0 0 0\n");
    for i in 0..cpus {
        stat.push_str(&format!("cpu{i} 0 0 0 0 0 0 0 0 0 0\n"));
    }
    stat.push_str(common::PROC_STAT_TAIL);
    put(&dir.join("stat"), &stat);
    put(
        &dir.join("meminfo"),
        &common::meminfo(16 * GI, 16 * GI - used),
    );
}

/// A v1 pod: cpuacct.usage (ns) and memory usage with `inactive` file cache.
fn v1_pod(root: &Path, rel: &Path, cpu_ns: u64, mem: u64, inactive: u64) {
    put(
        &root.join("cpuacct").join(rel).join("cpuacct.usage"),
        &cpu_ns.to_string(),
    );
    put(
        &root.join("memory").join(rel).join("memory.usage_in_bytes"),
        &mem.to_string(),
    );
    put(
        &root.join("memory").join(rel).join("memory.stat"),
        &format!("cache 1\ntotal_cache 5\ninactive_file 7\ntotal_inactive_file {inactive}\n"),
    );
}

#[test]
fn reads_v1_and_v2_cgroups_and_the_node() {
    let tmp = tempfile::tempdir().expect("tmp");
    let v1 = Layout::new(
        tmp.path().join("v1"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
    );
    let rel = v1.pod_dir(LS, KubeQos::Burstable).expect("dir");
    v1_pod(&v1.root, &rel, 123_456_789, 3 * GI, GI);
    let r = read_cgroup(&v1, &rel).expect("v1 reading");
    assert_eq!((r.cpu_ns, r.memory_bytes), (123_456_789, 2 * GI));

    let v2 = Layout::new(
        tmp.path().join("v2"),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
    );
    let rel2 = v2.pod_dir(BE, KubeQos::BestEffort).expect("dir");
    let d = v2.root.join(&rel2);
    put(
        &d.join("cpu.stat"),
        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
    );
    put(&d.join("memory.current"), &(GI + 4096).to_string());
    put(
        &d.join("memory.stat"),
        "anon 1\nfile 2\nactive_file 3\ninactive_file 4096\n",
    );
    let r = read_cgroup(&v2, &rel2).expect("v2 reading");
    assert_eq!((r.cpu_ns, r.memory_bytes), (2_500_000_000, GI));

    // Inactive file above usage (racy reads) floors at 0, not a wrap-around.
    v1_pod(&v1.root, &rel, 1, 100, 4096);
    assert_eq!(read_cgroup(&v1, &rel).expect("v1").memory_bytes, 0);
    // A missing pod is "not found", not a parse error.
    let gone = v1.pod_dir(NEW, KubeQos::Burstable).expect("dir");
    assert!(read_cgroup(&v1, &gone).expect_err("missing").is_not_found());
    // Garbage is an error naming the file.
    put(
        &v1.root.join("cpuacct").join(&rel).join("cpuacct.usage"),
        "lots",
    );
    let e = read_cgroup(&v1, &rel).expect_err("garbage").to_string();
    assert!(e.contains("cpuacct.usage"), "{e}");

    let proc = tmp.path().join("proc");
    write_proc(&proc, 250, 6 * GI, 4);
    let n = read_node(&proc).expect("node");
    assert_eq!(n.cpu_ns, 2_500_000_000, "250 jiffies at USER_HZ 100");
    assert_eq!(n.memory_bytes, 6 * GI);
}

#[test]
fn capacity_input_over_the_window_on_a_v1_tree() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
    );
    let proc = tmp.path().join("proc");
    let ls_rel = l.pod_dir(LS, KubeQos::Burstable).expect("dir");
    let be_rel = l.pod_dir(BE, KubeQos::BestEffort).expect("dir");
    let pods = vec![
        facts(
            LS,
            KubeQos::Burstable,
            false,
            Resources::new(2_000, 4 * GI as i64),
        ),
        facts(BE, KubeQos::BestEffort, true, Resources::ZERO),
        // Scheduled but no cgroup yet: counts its request as usage.
        facts(
            NEW,
            KubeQos::Burstable,
            false,
            Resources::new(500, GI as i64),
        ),
    ];
    let t0 = Instant::now();
    let window = Duration::from_secs(300);
    write_proc(&proc, 0, 6 * GI, 8);
    v1_pod(&l.root, &ls_rel, 0, 2 * GI, GI / 2);
    v1_pod(&l.root, &be_rel, 0, GI, 0);
    let mut e = Engine::new(l.clone(), &proc, 2_000).expect("engine");
    assert_eq!(e.node_cpus().len(), 8);
    let rep = e.sample(t0, &pods, window);
    assert!(rep.node_ok);
    assert_eq!((rep.pods_read, rep.pods_missing), (2, 1), "{rep:?}");
    let alloc = Resources::new(8_000, 16 * GI as i64);
    assert_eq!(
        e.capacity_input(alloc, &pods),
        None,
        "one reading has no CPU rate"
    );

    // 10 s later: node busy 30 s (3 cores), LS 10 s (1 core), BE 5 s (0.5 core).
    write_proc(&proc, 3_000, 6 * GI, 8);
    v1_pod(&l.root, &ls_rel, 10_000_000_000, 2 * GI, GI / 2);
    v1_pod(&l.root, &be_rel, 5_000_000_000, GI, 0);
    e.sample(t0 + Duration::from_secs(10), &pods, window);
    let input = e.capacity_input(alloc, &pods).expect("two readings");
    let gi = GI as i64;
    assert_eq!(input.node_usage, Resources::new(3_000, 6 * gi));
    assert_eq!(
        input.non_be_usage,
        Resources::new(1_000 + 500, 3 * gi / 2 + gi)
    );
    assert_eq!(
        input.pods_usage,
        Resources::new(1_500 + 500, 3 * gi / 2 + gi + gi)
    );
    assert_eq!(input.non_be_request, Resources::new(2_500, 5 * gi));
    let cfg = ColocationConfig {
        enable: true,
        ..ColocationConfig::default()
    };
    // cpu: 8000*60% - 1500 - (3000 - 2000) = 2300
    // mem: 16Gi*65% - 2.5Gi - (6Gi - 3.5Gi) = 10.4Gi - 5Gi
    let want_mem = 16 * gi * 65 / 100 - 5 * gi;
    assert_eq!(
        batch_capacity(&cfg, &input),
        Resources::new(2_300, want_mem)
    );
    assert_eq!(
        e.usage_age(t0 + Duration::from_secs(70)),
        Some(Duration::from_secs(60))
    );

    // A deleted pod's series is dropped: it no longer counts.
    e.sample(t0 + Duration::from_secs(12), &pods[..1], window);
    let input = e.capacity_input(alloc, &pods[..1]).expect("input");
    // LS: 10 s of CPU over 12 s; the BE pod's 0.5 core and 1 GiB are gone from the pods' sum.
    assert_eq!(input.pods_usage, input.non_be_usage);
    assert_eq!(input.pods_usage, Resources::new(833, 3 * gi / 2));
}

/// v2 tree: cpu.max and cpuset.cpus of `kubepods.slice/kubepods-besteffort.slice`.
#[test]
fn suppression_writes_the_v2_be_parent_and_lifts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
    );
    let proc = tmp.path().join("proc");
    let be_parent = l.root.join("kubepods.slice/kubepods-besteffort.slice");
    put(&be_parent.join("cpu.max"), "max 100000");
    put(&be_parent.join("cpuset.cpus"), "");
    put(&l.root.join("kubepods.slice/cpuset.cpus.effective"), "0-7");
    let ls_rel = l.pod_dir(LS, KubeQos::Burstable).expect("dir");
    let d = l.root.join(&ls_rel);
    let ls_pod = |usec: u64| {
        put(&d.join("cpu.stat"), &format!("usage_usec {usec}\n"));
        put(&d.join("memory.current"), "0");
        put(&d.join("memory.stat"), "inactive_file 0\n");
    };
    let pods = vec![facts(LS, KubeQos::Burstable, false, Resources::ZERO)];
    write_proc(&proc, 0, GI, 8);
    ls_pod(0);
    let mut e = Engine::new(l.clone(), &proc, 2_000).expect("engine");
    let t0 = Instant::now();
    let w = Duration::from_secs(300);
    e.sample(t0, &pods, w);
    // 10 s: node busy 40 s (4 cores), LS 30 s (3 cores): system 1 core.
    write_proc(&proc, 4_000, GI, 8);
    ls_pod(30_000_000);
    e.sample(t0 + Duration::from_secs(10), &pods, w);

    let mut strategy = ThresholdStrategy {
        enable: true,
        cpu_suppress_threshold_percent: 65,
        cpu_suppress_policy: SuppressPolicy::CfsQuota,
    };
    // 8 x 65% - 3 - 1 = 1.2 CPUs, below the 2-CPU floor -> 2 CPUs.
    let r = e.suppress(&strategy, &pods).expect("io").expect("round");
    assert_eq!(r.budget_milli, 2_000);
    assert!(r.suppressed);
    assert_eq!(r.limit, Limit::Quota(200_000));
    assert_eq!(get(&be_parent.join("cpu.max")), "200000 100000");
    assert!(r.applied.changed);
    let again = e.suppress(&strategy, &pods).expect("io").expect("round");
    assert!(!again.applied.changed, "same value: nothing written");

    // Switching policy lifts the quota and writes the cpuset (2 CPUs from the end).
    strategy.cpu_suppress_policy = SuppressPolicy::Cpuset;
    let r = e.suppress(&strategy, &pods).expect("io").expect("round");
    assert_eq!(r.limit, Limit::Cpuset(vec![6, 7]));
    assert_eq!(get(&be_parent.join("cpu.max")), "max 100000");
    assert_eq!(get(&be_parent.join("cpuset.cpus")), "6-7");

    // Disabled: lifted to all CPUs, and nothing more is written afterwards.
    strategy.enable = false;
    assert!(e.suppress(&strategy, &pods).expect("io").is_none());
    assert_eq!(get(&be_parent.join("cpuset.cpus")), "0-7");
    put(&be_parent.join("cpuset.cpus"), "3");
    assert!(e.suppress(&strategy, &pods).expect("io").is_none());
    assert_eq!(
        get(&be_parent.join("cpuset.cpus")),
        "3",
        "lifted once, not fought"
    );
}

/// v1 tree: the cpuset goes to the BE parent and every pod and container below it; a quota
/// left by a previous run is lifted at the first round when the strategy is off.
#[test]
fn suppression_v1_cpuset_reaches_children_and_leftovers_are_lifted() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
    );
    let proc = tmp.path().join("proc");
    write_proc(&proc, 0, GI, 4);
    let parent = l.root.join("cpuset/kubepods/besteffort");
    put(&l.root.join("cpuset/kubepods/cpuset.cpus"), "0-3");
    put(&parent.join("cpuset.cpus"), "0-3");
    let pod = parent.join(format!("pod{BE}"));
    put(&pod.join("cpuset.cpus"), "0-3");
    put(&pod.join("abc123/cpuset.cpus"), "0-3");
    put(
        &l.root.join("cpu/kubepods/besteffort/cpu.cfs_quota_us"),
        "150000",
    );
    put(
        &l.root.join("cpu/kubepods/besteffort/cpu.cfs_period_us"),
        "100000",
    );

    let mut e = Engine::new(l.clone(), &proc, 1_000).expect("engine");
    let off = ThresholdStrategy::default();
    assert!(e.suppress(&off, &[]).expect("io").is_none());
    assert_eq!(
        get(&l.root.join("cpu/kubepods/besteffort/cpu.cfs_quota_us")),
        "-1"
    );

    let lim = e
        .be_parent()
        .apply(&Limit::Cpuset(vec![3]))
        .expect("narrow");
    assert!(lim.changed);
    for f in [&parent, &pod, &pod.join("abc123")] {
        assert_eq!(get(&f.join("cpuset.cpus")), "3", "{}", f.display());
    }
    e.lift().expect("lift");
    for f in [&parent, &pod, &pod.join("abc123")] {
        assert_eq!(get(&f.join("cpuset.cpus")), "0-3", "{}", f.display());
    }
}

/// Cpuset policy on a v1 tree: an LS pod's container pinned to CPU 3 (static CPU manager) keeps
/// BE off CPU 3, both when suppressing and when lifting; a narrowed BE parent left by a previous
/// run is lifted at start-up.
#[test]
fn cpuset_policy_keeps_be_off_ls_bound_cpus() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
    );
    let proc = tmp.path().join("proc");
    write_proc(&proc, 0, GI, 4);
    let ls_rel = l.pod_dir(LS, KubeQos::Guaranteed).expect("dir");
    v1_pod(&l.root, &ls_rel, 0, 0, 0);
    put(
        &l.root.join("cpuset").join(&ls_rel).join("cpuset.cpus"),
        "0-3",
    );
    put(
        &l.root.join("cpuset").join(&ls_rel).join("c1/cpuset.cpus"),
        "3",
    );
    put(&l.root.join("cpuset/kubepods/cpuset.cpus"), "0-3");
    let parent = l.root.join("cpuset/kubepods/besteffort");
    // Left narrowed by a previous run.
    put(&parent.join("cpuset.cpus"), "2");
    let pods = vec![facts(LS, KubeQos::Guaranteed, false, Resources::ZERO)];
    let mut e = Engine::new(l.clone(), &proc, 1_000).expect("engine");
    let t0 = Instant::now();
    let w = Duration::from_secs(300);
    e.sample(t0, &pods, w);
    assert!(
        e.suppress(&ThresholdStrategy::default(), &pods)
            .expect("io")
            .is_none()
    );
    assert_eq!(
        get(&parent.join("cpuset.cpus")),
        "0-2",
        "leftover lifted, CPU 3 excluded"
    );

    // 10 s: node busy 30 s (3 cores), LS 20 s (2 cores): 4 x 65% - 2 - 1 < floor 1 -> 1 CPU.
    write_proc(&proc, 3_000, GI, 4);
    v1_pod(&l.root, &ls_rel, 20_000_000_000, 0, 0);
    e.sample(t0 + Duration::from_secs(10), &pods, w);
    let on = ThresholdStrategy {
        enable: true,
        ..ThresholdStrategy::default()
    };
    let r = e.suppress(&on, &pods).expect("io").expect("round");
    assert_eq!(r.budget_milli, 1_000);
    assert_eq!(
        r.limit,
        Limit::Cpuset(vec![2]),
        "the last CPU not bound to LS"
    );
    assert_eq!(get(&parent.join("cpuset.cpus")), "2");
    assert!(
        e.suppress(&ThresholdStrategy::default(), &pods)
            .expect("io")
            .is_none()
    );
    assert_eq!(get(&parent.join("cpuset.cpus")), "0-2");
}

/// Files the engine cannot read are reported (counted, logged with the path), never taken
/// for absent ones: here an LS container's `cpuset.cpus` and the `kubepods` cpuset are
/// directories. The lift goes on with what it knows (all online CPUs).
#[test]
fn unreadable_cpusets_are_reported_not_absent() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
    );
    let proc = tmp.path().join("proc");
    write_proc(&proc, 0, GI, 4);
    let ls_rel = l.pod_dir(LS, KubeQos::Guaranteed).expect("dir");
    v1_pod(&l.root, &ls_rel, 0, 0, 0);
    let ls_cpuset = l.root.join("cpuset").join(&ls_rel);
    std::fs::create_dir_all(ls_cpuset.join("c1/cpuset.cpus")).expect("a directory");
    std::fs::create_dir_all(l.root.join("cpuset/kubepods/cpuset.cpus")).expect("a directory");
    let parent = l.root.join("cpuset/kubepods/besteffort");
    put(&parent.join("cpuset.cpus"), "2");
    let pods = vec![facts(LS, KubeQos::Guaranteed, false, Resources::ZERO)];
    let mut e = Engine::new(l.clone(), &proc, 1_000).expect("engine");
    e.sample(Instant::now(), &pods, Duration::from_secs(300));
    let before = koord_translator::cgroup::file::read_errors();
    assert!(
        e.suppress(&ThresholdStrategy::default(), &pods)
            .expect("io")
            .is_none()
    );
    assert_eq!(
        get(&parent.join("cpuset.cpus")),
        "0-3",
        "lifted to the online CPUs"
    );
    // The kubepods cpuset (twice: start-up check and lift) and the container's.
    assert!(
        koord_translator::cgroup::file::read_errors() >= before + 3,
        "each unreadable file counted"
    );
}

/// A node without a BE parent cgroup (no kubelet tree): suppression has nothing to squeeze and
/// is not an error.
#[test]
fn no_be_parent_is_not_an_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = Layout::new(
        tmp.path().join("cg"),
        CgroupVersion::V2,
        CgroupDriver::Cgroupfs,
    );
    let proc = tmp.path().join("proc");
    write_proc(&proc, 0, GI, 2);
    let mut e = Engine::new(l, &proc, 2_000).expect("engine");
    let t0 = Instant::now();
    e.sample(t0, &[], Duration::from_secs(60));
    write_proc(&proc, 100, GI, 2);
    e.sample(t0 + Duration::from_secs(1), &[], Duration::from_secs(60));
    let on = ThresholdStrategy {
        enable: true,
        cpu_suppress_policy: SuppressPolicy::CfsQuota,
        ..ThresholdStrategy::default()
    };
    assert!(e.suppress(&on, &[]).expect("no error").is_none());
    assert!(
        e.suppress(&ThresholdStrategy::default(), &[])
            .expect("no error")
            .is_none()
    );
}
