//! Hierarchical memory protection on temporary trees: `kubepods` and the QoS-class directories
//! end at the sums of what their direct children hold (cgroup v2 with both drivers, Alibaba
//! Cloud Linux v1), through the `once` binary and the library pass; mainline v1 reports the
//! files unsupported; the flag off and the kubelet's MemoryQoS mode.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Kernel, ancestor_dirs, fixture, fixture_path, layout, make_pod_tree, read, snapshot};
use koord_applier::metrics::Metrics;
use koord_applier::node::ancestors::{KubeletMemoryQos, MemoryAncestors};
use koord_translator::cgroup::layout::{KubeQos, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller, Outcome};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::spec_view::PodSpecView;

const MIB: u64 = 1 << 20;
/// ls-redis.json: pod-level memory.min = memory.low = 70 MiB.
const REDIS_POD: u64 = 73_400_320;
const OTHER_LS_UID: &str = "0a0b0c0d-1111-4222-8333-444455556666";
const GUARANTEED_UID: &str = "1a1b1c1d-1111-4222-8333-444455556666";
const BE_UID: &str = "2a2b2c2d-1111-4222-8333-444455556666";

fn once(root: &Path, driver: &str, file: &str, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args(["once", "-f", &fixture_path(file), "--cgroup-version", "v2"])
        .args(["--cgroup-driver", driver])
        .arg("--cgroup-root")
        .arg(root)
        .args(extra)
        .output()
        .expect("run binary");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

/// A pod directory (memory controller) holding `min`/`low`, made as the kubelet would and
/// already set, as an earlier pass of the applier leaves it.
fn pod_holding(l: &Layout, uid: &str, qos: KubeQos, min: u64, low: u64) -> PathBuf {
    let dir = l
        .dir(&l.pod_dir(uid, qos).expect("pod dir"), Controller::Memory)
        .expect("dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("memory.min"), format!("{min}\n")).expect("min");
    std::fs::write(dir.join("memory.low"), format!("{low}\n")).expect("low");
    dir
}

/// The node of most tests: the ls-redis pod (70 MiB, from its annotation) and, already
/// holding their values, another Burstable LS pod (128 / 160 MiB), a Guaranteed pod (50 / 60
/// MiB) and a BE pod (0 / 0).
fn node(l: &Layout, kernel: Kernel) -> PodSpecView {
    let redis = PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view");
    make_pod_tree(l, kernel, &redis);
    pod_holding(l, OTHER_LS_UID, KubeQos::Burstable, 128 * MIB, 160 * MIB);
    pod_holding(l, GUARANTEED_UID, KubeQos::Guaranteed, 50 * MIB, 60 * MIB);
    pod_holding(l, BE_UID, KubeQos::BestEffort, 0, 0);
    redis
}

/// (min, low) of `dir`.
fn held(dir: &Path) -> (u64, u64) {
    let n = |f: &str| read(&dir.join(f)).parse::<u64>().expect("bytes");
    (n("memory.min"), n("memory.low"))
}

fn ancestors_of(report: &serde_json::Value) -> Vec<(String, String, String, String)> {
    report["ancestors"]["cgroups"]
        .as_array()
        .expect("ancestors section")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("cgroup"), s("file"), s("new"), s("outcome"))
        })
        .collect()
}

#[test]
fn once_on_v2_leaves_the_sums_of_the_children_and_a_second_pass_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);

    let (code, first) = once(tmp.path(), "cgroupfs", "ls-redis.json", &[]);
    assert_eq!((code, first["status"].as_str()), (0, Some("applied")));
    let bu = (REDIS_POD + 128 * MIB, REDIS_POD + 160 * MIB);
    assert_eq!(held(&burstable), bu, "burstable = its two pods");
    assert_eq!(held(&besteffort), (0, 0), "BE never gains protection");
    // kubepods = burstable + besteffort + the Guaranteed pod directly below it.
    let kp = (bu.0 + 50 * MIB, bu.1 + 60 * MIB);
    assert_eq!(held(&kubepods), kp);
    let s = |v: u64| v.to_string();
    assert_eq!(
        ancestors_of(&first),
        vec![
            (
                "kubepods/burstable".into(),
                "memory.min".into(),
                s(bu.0),
                "written".into()
            ),
            (
                "kubepods/burstable".into(),
                "memory.low".into(),
                s(bu.1),
                "written".into()
            ),
            (
                "kubepods/besteffort".into(),
                "memory.min".into(),
                s(0),
                "unchanged".into()
            ),
            (
                "kubepods/besteffort".into(),
                "memory.low".into(),
                s(0),
                "unchanged".into()
            ),
            (
                "kubepods".into(),
                "memory.min".into(),
                s(kp.0),
                "written".into()
            ),
            (
                "kubepods".into(),
                "memory.low".into(),
                s(kp.1),
                "written".into()
            ),
        ]
    );
    let c = &first["ancestors"]["cgroups"][4];
    assert_eq!(
        (c["children"].as_u64(), c["old"].as_str(), c["sum"].as_str()),
        (Some(3), Some("0"), Some(s(kp.0).as_str())),
        "kubepods' children: burstable, besteffort, the Guaranteed pod: {c}"
    );

    let before = snapshot(tmp.path());
    let (code, second) = once(tmp.path(), "cgroupfs", "ls-redis.json", &[]);
    assert_eq!((code, second["status"].as_str()), (0, Some("unchanged")));
    assert!(
        ancestors_of(&second)
            .iter()
            .all(|(_, _, _, o)| o == "unchanged"),
        "{second}"
    );
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "the second pass writes nothing"
    );
}

#[test]
fn systemd_slices_library_pass_pod_deletion_shrinks_and_metrics() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let redis = node(&l, Kernel::MainlineV2);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);
    assert!(burstable.ends_with("kubepods.slice/kubepods-burstable.slice"));
    let metrics = std::sync::Arc::new(Metrics::new().expect("metrics"));
    Applier::new(l.clone(), false, None).apply(&redis);
    let pass = MemoryAncestors::new(
        l.clone(),
        false,
        KubeletMemoryQos::Off,
        Some(metrics.clone()),
    );
    let r = pass.reconcile();
    assert_eq!(r.count(Outcome::Written), 4, "{r:#?}");
    assert_eq!(
        held(&burstable),
        (REDIS_POD + 128 * MIB, REDIS_POD + 160 * MIB)
    );
    assert_eq!(
        held(&kubepods),
        (REDIS_POD + 178 * MIB, REDIS_POD + 220 * MIB)
    );
    assert_eq!(held(&besteffort), (0, 0));
    assert_eq!(r.cgroups[4].cgroup, "kubepods.slice");

    // The other LS pod is deleted (the kubelet removes its directory): both sums shrink.
    let other = l
        .dir(
            &l.pod_dir(OTHER_LS_UID, KubeQos::Burstable).expect("pod"),
            Controller::Memory,
        )
        .expect("dir");
    std::fs::remove_dir_all(other).expect("rm pod");
    let r = pass.reconcile();
    assert_eq!(r.count(Outcome::Written), 4, "{r:#?}");
    assert_eq!(held(&burstable), (REDIS_POD, REDIS_POD));
    assert_eq!(
        held(&kubepods),
        (REDIS_POD + 50 * MIB, REDIS_POD + 60 * MIB)
    );
    assert_eq!(pass.reconcile().count(Outcome::Written), 0);

    let text = metrics.render();
    for needle in [
        // 4 writes per pass that changed something, on the ancestors alone.
        "koord_applier_cgroup_writes_total{knob=\"memory.min\",outcome=\"written\"} 4",
        "koord_applier_cgroup_writes_total{knob=\"memory.low\",outcome=\"written\"} 4",
        "koord_applier_cgroup_writes_total{knob=\"memory.min\",outcome=\"unchanged\"} 5",
        "koord_applier_qos_memory_protection_bytes{cgroup=\"kubepods.slice/kubepods-burstable.slice\",file=\"memory.min\"} 73400320",
        "koord_applier_qos_memory_protection_bytes{cgroup=\"kubepods.slice/kubepods-besteffort.slice\",file=\"memory.low\"} 0",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

#[test]
fn besteffort_stays_at_its_pods_sum_and_drift_is_repaired() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let be = PodSpecView::from_pod(&fixture("be-transcode.json")).expect("view");
    make_pod_tree(&l, Kernel::MainlineV2, &be);
    pod_holding(&l, BE_UID, KubeQos::BestEffort, 0, 0);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);
    // Raised behind our back (by hand, another agent): BE must not keep protection.
    std::fs::write(besteffort.join("memory.min"), "67108864\n").expect("drift");
    std::fs::write(kubepods.join("memory.low"), "67108864\n").expect("drift");
    let (code, r) = once(tmp.path(), "cgroupfs", "be-transcode.json", &[]);
    assert_eq!(code, 0, "{r}");
    for dir in [&burstable, &besteffort, &kubepods] {
        assert_eq!(held(dir), (0, 0), "{}", dir.display());
    }
    assert_eq!(
        ancestors_of(&r)[2],
        (
            "kubepods/besteffort".into(),
            "memory.min".into(),
            "0".into(),
            "written".into()
        )
    );
}

#[test]
fn alibaba_v1_memory_hierarchy_gets_the_sums() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let redis = node(&l, Kernel::AlibabaV1);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);
    assert!(burstable.starts_with(tmp.path().join("memory")));
    Applier::new(l.clone(), false, None).apply(&redis);
    let r = MemoryAncestors::new(l.clone(), false, KubeletMemoryQos::Off, None).reconcile();
    assert_eq!(r.count(Outcome::Written), 4, "{r:#?}");
    assert_eq!(
        held(&burstable),
        (REDIS_POD + 128 * MIB, REDIS_POD + 160 * MIB)
    );
    assert_eq!(held(&besteffort), (0, 0));
    assert_eq!(
        held(&kubepods),
        (REDIS_POD + 178 * MIB, REDIS_POD + 220 * MIB)
    );
    // The cpu hierarchy is not touched.
    assert!(!tmp.path().join("cpu/kubepods/memory.min").exists());
    assert_eq!(
        MemoryAncestors::new(l, false, KubeletMemoryQos::Off, None)
            .reconcile()
            .count(Outcome::Written),
        0
    );
}

#[test]
fn mainline_v1_reports_the_files_unsupported_and_creates_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let redis = PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view");
    make_pod_tree(&l, Kernel::MainlineV1, &redis);
    let before = snapshot(tmp.path());
    let r = MemoryAncestors::new(l, false, KubeletMemoryQos::Off, None).reconcile();
    assert_eq!(r.cgroups.len(), 6);
    assert_eq!(r.count(Outcome::Unsupported), 6, "{r:#?}");
    assert!(r.cgroups.iter().all(|c| c.children == 0 && c.new.is_none()));
    assert_eq!(snapshot(tmp.path()), before, "no file created");
}

#[test]
fn flag_off_leaves_the_ancestors_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let [burstable, _, kubepods] = ancestor_dirs(&l);
    let (code, r) = once(
        tmp.path(),
        "cgroupfs",
        "ls-redis.json",
        &["--protect-ancestors=false"],
    );
    assert_eq!((code, r["status"].as_str()), (0, Some("applied")));
    assert!(r.get("ancestors").is_none(), "{r}");
    assert_eq!((held(&burstable), held(&kubepods)), ((0, 0), (0, 0)));
    // The environment variable works the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args(["once", "-f", &fixture_path("ls-redis.json")])
        .args(["--cgroup-version", "v2", "--cgroup-driver", "cgroupfs"])
        .arg("--cgroup-root")
        .arg(tmp.path())
        .env("KOORD_PROTECT_ANCESTORS", "false")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!((held(&burstable), held(&kubepods)), ((0, 0), (0, 0)));
}

/// What a 1.37 kubelet with `memoryReservationPolicy: TieredReservation` writes on every QoS
/// cgroup update (`setMemoryQoS`, kubelet v1.37.2): kubepods memory.min = Guaranteed +
/// Burstable requests, kubepods memory.low = Burstable requests, burstable memory.low =
/// Burstable requests.
fn tiered_kubelet_update(burstable: &Path, kubepods: &Path, g_requests: u64, b_requests: u64) {
    std::fs::write(burstable.join("memory.low"), format!("{b_requests}\n")).expect("kubelet");
    std::fs::write(
        kubepods.join("memory.min"),
        format!("{}\n", g_requests + b_requests),
    )
    .expect("kubelet");
    std::fs::write(kubepods.join("memory.low"), format!("{b_requests}\n")).expect("kubelet");
}

#[test]
fn tiered_kubelet_files_are_the_kubelets_and_passes_never_write_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);
    // The node's requests: Burstable 50+20 Mi (redis) + 256 Mi, Guaranteed 64 Mi.
    let (g, b) = (64 * MIB, 326 * MIB);
    tiered_kubelet_update(&burstable, &kubepods, g, b);
    let (code, r) = once(
        tmp.path(),
        "cgroupfs",
        "ls-redis.json",
        &["--kubelet-memory-qos=tiered"],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["ancestors"]["kubeletMemoryQos"], "tiered");
    // burstable memory.min is the applier's (the kubelet does not write it): the sum.
    let bu_min = REDIS_POD + 128 * MIB;
    assert_eq!(held(&burstable), (bu_min, b), "memory.low is the kubelet's");
    assert_eq!(
        held(&kubepods),
        (g + b, b),
        "both kubepods files are the kubelet's"
    );
    assert_eq!(held(&besteffort), (0, 0));
    let entries = r["ancestors"]["cgroups"].as_array().expect("cgroups");
    let owned: Vec<(&str, &str, &str)> = entries
        .iter()
        .filter(|c| c["keptKubeletValue"] == true)
        .map(|c| {
            (
                c["cgroup"].as_str().unwrap_or_default(),
                c["file"].as_str().unwrap_or_default(),
                c["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        owned,
        vec![
            ("kubepods/burstable", "memory.low", "unchanged"),
            ("kubepods", "memory.min", "unchanged"),
            ("kubepods", "memory.low", "unchanged"),
        ]
    );
    // kubepods memory.low counts Burstable requests only, below what the children hold
    // (burstable's 326 Mi + the Guaranteed pod's 60 Mi): reported as capped, not raised.
    let kp_low = &entries[5];
    assert!(
        kp_low["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the kernel caps them")),
        "{kp_low}"
    );

    // Convergence: the kubelet keeps updating (here with a new Burstable pod's request), the
    // applier keeps passing; the kubelet's files only ever hold the kubelet's values and no
    // pass writes anything once the applier's own files hold their sums.
    for round in 0..3u64 {
        let b = b + round * 32 * MIB;
        tiered_kubelet_update(&burstable, &kubepods, g, b);
        let before = snapshot(tmp.path());
        let (code, r) = once(
            tmp.path(),
            "cgroupfs",
            "ls-redis.json",
            &["--kubelet-memory-qos=tiered"],
        );
        assert_eq!(code, 0, "{r}");
        assert_eq!(
            snapshot(tmp.path()),
            before,
            "round {round}: nothing written"
        );
        assert!(
            ancestors_of(&r).iter().all(|(_, _, _, o)| o == "unchanged"),
            "round {round}: {r}"
        );
        assert_eq!(held(&kubepods), (g + b, b));
        assert_eq!(held(&burstable), (bu_min, b));
    }
    // The bare flag means tiered.
    let (code, r) = once(
        tmp.path(),
        "cgroupfs",
        "ls-redis.json",
        &["--kubelet-memory-qos"],
    );
    assert_eq!(
        (code, r["ancestors"]["kubeletMemoryQos"].as_str()),
        (0, Some("tiered"))
    );
    // Without the mode the same tree goes back to the plain sums: a kubelet with the policy
    // None writes these files only when it starts.
    let (code, _) = once(tmp.path(), "cgroupfs", "ls-redis.json", &[]);
    assert_eq!(code, 0);
    assert_eq!(held(&burstable), (bu_min, REDIS_POD + 160 * MIB));
}

#[test]
fn alpha_kubelet_owns_both_memory_min_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let [burstable, besteffort, kubepods] = ancestor_dirs(&l);
    // The 1.22-1.35 alpha: burstable memory.min = Burstable requests, kubepods memory.min =
    // all requests; memory.low is not the kubelet's.
    std::fs::write(burstable.join("memory.min"), "1073741824\n").expect("kubelet");
    std::fs::write(kubepods.join("memory.min"), "4096\n").expect("kubelet");
    for _ in 0..2 {
        let (code, r) = once(
            tmp.path(),
            "cgroupfs",
            "ls-redis.json",
            &["--kubelet-memory-qos=alpha"],
        );
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["ancestors"]["kubeletMemoryQos"], "alpha");
        let bu_low = REDIS_POD + 160 * MIB;
        assert_eq!(held(&burstable), (1 << 30, bu_low));
        // kubepods memory.min stays the kubelet's 4096 (capped, reported); its memory.low is
        // the sum of burstable's and the Guaranteed pod's.
        assert_eq!(held(&kubepods), (4096, bu_low + 60 * MIB));
        assert_eq!(held(&besteffort), (0, 0));
    }
}

#[test]
fn dry_run_reports_the_sums_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    // The pod holds its values already, so the dry run's sums are the real ones.
    pod_holding(
        &l,
        "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab",
        KubeQos::Burstable,
        REDIS_POD,
        REDIS_POD,
    );
    let before = snapshot(tmp.path());
    let (code, r) = once(tmp.path(), "cgroupfs", "ls-redis.json", &["--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(snapshot(tmp.path()), before, "dry run writes nothing");
    let a = ancestors_of(&r);
    assert_eq!(a[0].2, (REDIS_POD + 128 * MIB).to_string());
    assert_eq!(a[0].3, "written");
    assert_eq!(a[4].2, (REDIS_POD + 178 * MIB).to_string());
}

#[test]
fn refused_pod_leaves_the_ancestors_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let file = common::forged_pod_file(tmp.path());
    let before = snapshot(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args([
            "once",
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "cgroupfs",
        ])
        .arg("-f")
        .arg(&file)
        .arg("--cgroup-root")
        .arg(tmp.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(r.get("ancestors").is_none(), "{r}");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn an_unreadable_child_fails_that_file_and_the_exit_code() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let other = pod_holding(&l, OTHER_LS_UID, KubeQos::Burstable, 128 * MIB, 160 * MIB);
    std::fs::write(other.join("memory.low"), "garbage\n").expect("corrupt");
    let (code, r) = once(tmp.path(), "cgroupfs", "ls-redis.json", &[]);
    assert_eq!(code, 2, "{r}");
    let a = ancestors_of(&r);
    assert_eq!(a[0].3, "written", "memory.min still summed");
    assert_eq!(a[1].3, "failed");
    let reason = r["ancestors"]["cgroups"][1]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("memory.low") && reason.contains("garbage"),
        "{reason}"
    );
    let [burstable, ..] = ancestor_dirs(&l);
    assert_eq!(
        held(&burstable),
        (REDIS_POD + 128 * MIB, 0),
        "the failed file is left alone"
    );
}

#[test]
fn kept_child_files_see_new_values_and_replaced_children() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    node(&l, Kernel::MainlineV2);
    let [burstable, ..] = ancestor_dirs(&l);
    let pass = MemoryAncestors::new(l.clone(), false, KubeletMemoryQos::Off, None);
    pass.reconcile();
    assert_eq!(
        held(&burstable),
        (128 * MIB, 160 * MIB),
        "redis not applied yet: 0"
    );
    // Written behind the pass's back into the same file: the kept fd reads the new value.
    let other = pod_holding(&l, OTHER_LS_UID, KubeQos::Burstable, 64 * MIB, 96 * MIB);
    pass.reconcile();
    assert_eq!(held(&burstable), (64 * MIB, 96 * MIB));
    // The directory replaced (a new cgroup of the same name): never the old file's value.
    std::fs::remove_dir_all(&other).expect("rm");
    pod_holding(&l, OTHER_LS_UID, KubeQos::Burstable, 32 * MIB, 48 * MIB);
    pass.reconcile();
    assert_eq!(held(&burstable), (32 * MIB, 48 * MIB));
}

/// The check between passes: what moved behind the pass (the kubelet's restart zeroes
/// `kubepods` and the Burstable class's `memory.low`) goes back to the value the last pass left,
/// without a pass; what did not move is not written; a second check finds nothing.
#[test]
fn the_check_puts_moved_values_back_without_a_pass() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let redis = node(&l, Kernel::MainlineV2);
    let [burstable, _, kubepods] = ancestor_dirs(&l);
    Applier::new(l.clone(), false, None).apply(&redis);
    let ancestors = MemoryAncestors::new(l.clone(), false, KubeletMemoryQos::Off, None);
    ancestors.reconcile();
    let before = (held(&burstable), held(&kubepods));
    assert_eq!(ancestors.put_back_moved(), None, "nothing moved yet");

    for f in ["memory.min", "memory.low"] {
        std::fs::write(kubepods.join(f), "0\n").expect("zero");
    }
    std::fs::write(burstable.join("memory.low"), "0\n").expect("zero");
    let first = ancestors.put_back_moved().expect("a moved file");
    assert_eq!(
        first,
        burstable.join("memory.low"),
        "the pass's order: bottom-up"
    );
    assert_eq!((held(&burstable), held(&kubepods)), before);
    assert_eq!(ancestors.put_back_moved(), None, "all put back");
}
