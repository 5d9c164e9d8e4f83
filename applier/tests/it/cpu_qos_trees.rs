//! Issue 9 on temporary trees: group identity on a tree shaped like Alibaba Cloud Linux v1
//! (`cpu.bvt_warp_ns` present), the `cpu.idle` fallback on a mainline v1 tree (no bvt) with the
//! flag off and on, the QoS-class parents, and resctrl through `once` on a tree shaped like a
//! resctrl mount with two cache domains (tasks of a deleted pod cleaned up by the node pass).

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Kernel, fixture, layout, make_pod_tree, read, snapshot};
use k8s_openapi::api::core::v1::Pod;
use koord_api::{DecisionSource, QosClass, ResolvedCpuQos, ResolvedQos, ResolvedResctrlQos, keys};
use koord_applier::metrics::Metrics;
use koord_applier::node::qos_parents::{NodeQos, detect_caps, detect_resctrl};
use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::layout::KubeQos;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::events::{REASON_APPLIED, REASON_REFUSED, event_for};
use koord_translator::pod::plan::NodeCaps;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

const LS_POD: &str = "kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const BE_POD: &str = "kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed";
const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const EXPORTER: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const FFMPEG: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const UPLOADER: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn edit(mut pod: Pod, f: impl FnOnce(&mut ResolvedQos)) -> Pod {
    let ann = pod
        .metadata
        .annotations
        .as_mut()
        .expect("annotations")
        .get_mut(keys::ANNOTATION_RESOLVED_QOS)
        .expect("resolved-qos");
    let mut q = ResolvedQos::from_annotation(ann).expect("contract");
    f(&mut q);
    *ann = q.to_annotation();
    pod
}

fn cpu(gi: i64) -> Option<ResolvedCpuQos> {
    Some(ResolvedCpuQos {
        enabled: true,
        group_identity: gi,
        source: DecisionSource::ClusterConfig,
    })
}

fn pods() -> (PodSpecView, PodSpecView) {
    let ls = edit(fixture("ls-redis.json"), |q| q.cpu_qos = cpu(2));
    let be = edit(fixture("be-transcode.json"), |q| q.cpu_qos = cpu(-1));
    (
        PodSpecView::from_pod(&ls).expect("ls"),
        PodSpecView::from_pod(&be).expect("be"),
    )
}

/// The cpu files of every cgroup (kubepods, the QoS parents, pods, containers) on `kernel`.
fn seed_cpu(root: &Path, file: &str, value: &str) {
    for d in [
        "kubepods",
        "kubepods/burstable",
        "kubepods/besteffort",
        LS_POD,
        &format!("{LS_POD}/{REDIS}"),
        &format!("{LS_POD}/{EXPORTER}"),
        BE_POD,
        &format!("{BE_POD}/{FFMPEG}"),
        &format!("{BE_POD}/{UPLOADER}"),
    ] {
        let dir = root.join("cpu").join(d);
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join(file), format!("{value}\n")).expect("seed");
    }
}

fn cpu_file(root: &Path, rel: &str, file: &str) -> String {
    read(&root.join("cpu").join(rel).join(file))
}

#[test]
fn alibaba_v1_group_identity_every_file_parents_and_idempotence() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let l = layout(root, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let (ls, be) = pods();
    make_pod_tree(&l, Kernel::AlibabaV1, &ls);
    make_pod_tree(&l, Kernel::AlibabaV1, &be);
    seed_cpu(root, "cpu.bvt_warp_ns", "0");
    let caps = detect_caps(&l, false, false);
    assert_eq!(
        caps,
        NodeCaps {
            bvt_warp_ns: true,
            cpu_idle_fallback: false,
            idle_qos_parents: false,
            cpu_idle: false,
        }
    );
    let metrics = std::sync::Arc::new(Metrics::new().expect("metrics"));
    let applier = Applier::new(l.clone(), false, Some(metrics.apply.clone())).with_caps(caps);
    let r_ls = applier.apply(&ls);
    let r_be = applier.apply(&be);
    assert_eq!(
        (r_ls.status, r_be.status),
        (PodStatus::Applied, PodStatus::Applied)
    );
    for (rel, want) in [
        (LS_POD.to_owned(), "2"),
        (format!("{LS_POD}/{REDIS}"), "2"),
        (format!("{LS_POD}/{EXPORTER}"), "2"),
        (BE_POD.to_owned(), "-1"),
        (format!("{BE_POD}/{FFMPEG}"), "-1"),
        (format!("{BE_POD}/{UPLOADER}"), "-1"),
    ] {
        assert_eq!(cpu_file(root, &rel, "cpu.bvt_warp_ns"), want, "{rel}");
    }
    // The BE pod keeps its batch cpu.shares (group identity does not lock shares).
    assert_eq!(cpu_file(root, BE_POD, "cpu.shares"), "72192");
    // The Event names the new knob per cgroup.
    let ev = event_for(&r_be).expect("event");
    assert_eq!(ev.reason, REASON_APPLIED);
    assert!(
        ev.message.contains("; ffmpeg ")
            && ev.message.contains("cpu.bvt_warp_ns=-1")
            && ev.message.starts_with("cgroup v1: pod "),
        "{}",
        ev.message
    );
    // Parents: burstable = what its pods agree on (LS 2), besteffort = BE -1, kubepods 0.
    let node = NodeQos::new(l.clone(), false, caps, None, Some(metrics.clone()));
    let nr = node.resync(&[ls.clone(), be.clone()]);
    assert_eq!(nr.parents.len(), 2);
    assert!(nr.parents.iter().all(|p| p.outcome == Outcome::Written));
    assert_eq!(cpu_file(root, "kubepods/burstable", "cpu.bvt_warp_ns"), "2");
    assert_eq!(
        cpu_file(root, "kubepods/besteffort", "cpu.bvt_warp_ns"),
        "-1"
    );
    assert_eq!(cpu_file(root, "kubepods", "cpu.bvt_warp_ns"), "0");
    // Idempotent: a second pass writes nothing, pods and parents.
    let before = snapshot(root);
    assert_eq!(applier.apply(&ls).count(Outcome::Written), 0);
    assert_eq!(applier.apply(&be).status, PodStatus::Unchanged);
    let nr = node.resync(&[ls.clone(), be.clone()]);
    assert!(nr.parents.iter().all(|p| p.outcome == Outcome::Unchanged));
    assert_eq!(snapshot(root), before);
    // A disagreement below a parent resets it to 0; disabled group identity writes 0.
    let ls_disabled = PodSpecView::from_pod(&edit(fixture("ls-redis.json"), |q| {
        q.cpu_qos = Some(ResolvedCpuQos {
            enabled: false,
            group_identity: 2,
            source: DecisionSource::ClusterConfig,
        })
    }))
    .expect("view");
    applier.apply(&ls_disabled);
    assert_eq!(cpu_file(root, LS_POD, "cpu.bvt_warp_ns"), "0");
    let mut other = ls.clone();
    other.uid = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ac".into();
    node.resync(&[ls.clone(), other.clone(), be.clone()]);
    assert_eq!(cpu_file(root, "kubepods/burstable", "cpu.bvt_warp_ns"), "2");
    node.resync(&[ls_disabled, ls.clone(), be.clone()]);
    assert_eq!(cpu_file(root, "kubepods/burstable", "cpu.bvt_warp_ns"), "0");
    let text = metrics.render();
    assert!(
        text.contains(
            "koord_applier_cgroup_writes_total{knob=\"cpu.bvt_warp_ns\",outcome=\"written\"}"
        ),
        "{text}"
    );
}

#[test]
fn forged_group_identity_is_refused_and_nothing_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let l = layout(root, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let be = PodSpecView::from_pod(&edit(fixture("be-transcode.json"), |q| q.cpu_qos = cpu(5)))
        .expect("view");
    make_pod_tree(&l, Kernel::AlibabaV1, &be);
    seed_cpu(root, "cpu.bvt_warp_ns", "0");
    let before = snapshot(root);
    let r = Applier::new(l, false, None).apply(&be);
    assert_eq!(r.status, PodStatus::Refused);
    assert_eq!(
        r.reason.as_deref(),
        Some("cpuQOS.groupIdentity = 5 is outside -1..=2")
    );
    let ev = event_for(&r).expect("event");
    assert_eq!(ev.reason, REASON_REFUSED);
    assert_eq!(snapshot(root), before, "nothing written");
}

#[test]
fn mainline_v1_without_bvt_fallback_off_reports_unsupported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let l = layout(root, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let (ls, be) = pods();
    make_pod_tree(&l, Kernel::MainlineV1, &ls);
    make_pod_tree(&l, Kernel::MainlineV1, &be);
    seed_cpu(root, "cpu.idle", "0");
    let caps = detect_caps(&l, false, false);
    assert!(!caps.bvt_warp_ns && !caps.uses_cpu_idle());
    let applier = Applier::new(l.clone(), false, None).with_caps(caps);
    let r = applier.apply(&be);
    assert!(
        r.knobs
            .iter()
            .filter(|k| k.file == "cpu.bvt_warp_ns")
            .all(|k| k.outcome == Outcome::Unsupported)
    );
    assert!(
        !root
            .join("cpu")
            .join(BE_POD)
            .join("cpu.bvt_warp_ns")
            .exists()
    );
    assert_eq!(cpu_file(root, BE_POD, "cpu.idle"), "0", "fallback is off");
    assert!(
        event_for(&r)
            .expect("event")
            .message
            .contains("unsupported on this node: cpu.bvt_warp_ns")
    );
    // The fallback turned off after a run with it: the leftover idle pod and besteffort
    // parent are put back to 0 (the kernel refuses the kubelet's cpu.shares on them).
    assert!(caps.cpu_idle_reset(), "{caps:?}");
    fs::write(root.join("cpu").join(BE_POD).join("cpu.idle"), "1\n").expect("seed");
    fs::write(root.join("cpu/kubepods/besteffort/cpu.idle"), "1\n").expect("seed");
    let r = applier.apply(&be);
    assert_eq!(cpu_file(root, BE_POD, "cpu.idle"), "0", "{r:#?}");
    let nr = NodeQos::new(l, false, caps, None, None).resync(&[ls, be]);
    assert_eq!(cpu_file(root, "kubepods/besteffort", "cpu.idle"), "0");
    assert_eq!(cpu_file(root, "kubepods/burstable", "cpu.idle"), "0");
    assert_eq!(cpu_file(root, "kubepods", "cpu.idle"), "0", "never written");
    assert_eq!(
        nr.parents
            .iter()
            .map(|p| (p.value, p.outcome))
            .collect::<Vec<_>>(),
        [(0, Outcome::Unchanged), (0, Outcome::Written)],
        "burstable held, besteffort reset: {nr:#?}"
    );
}

#[test]
fn mainline_v1_cpu_idle_fallback_every_file_and_idempotence() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let l = layout(root, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let (ls, be) = pods();
    make_pod_tree(&l, Kernel::MainlineV1, &ls);
    make_pod_tree(&l, Kernel::MainlineV1, &be);
    seed_cpu(root, "cpu.idle", "0");
    let caps = detect_caps(&l, true, false);
    assert!(caps.uses_cpu_idle());
    let applier = Applier::new(l.clone(), false, None).with_caps(caps);
    let r_be = applier.apply(&be);
    let r_ls = applier.apply(&ls);
    assert_eq!(r_be.status, PodStatus::Applied, "{r_be:#?}");
    assert_eq!(cpu_file(root, BE_POD, "cpu.idle"), "1");
    // The idle pod cgroup's cpu.shares is not written (the kernel would refuse it).
    assert_eq!(cpu_file(root, BE_POD, "cpu.shares"), "1024");
    assert!(
        !r_be
            .knobs
            .iter()
            .any(|k| k.file == "cpu.shares" && k.target.to_string() == "pod")
    );
    // Containers: batch shares and quota as before, no cpu.idle of their own.
    for c in [FFMPEG, UPLOADER] {
        let rel = format!("{BE_POD}/{c}");
        assert_eq!(cpu_file(root, &rel, "cpu.idle"), "0", "{rel}");
    }
    assert_eq!(
        cpu_file(root, &format!("{BE_POD}/{FFMPEG}"), "cpu.shares"),
        "71680"
    );
    assert_eq!(cpu_file(root, LS_POD, "cpu.idle"), "0");
    assert!(
        r_ls.knobs
            .iter()
            .any(|k| k.file == "cpu.idle" && k.outcome == Outcome::Unchanged)
    );
    assert!(
        event_for(&r_be)
            .expect("event")
            .message
            .starts_with("cgroup v1: pod cpu.idle=1"),
    );
    // By default the QoS parents stay 0 (the kubelet writes their weight), and a leftover 1
    // from an earlier release is put back to 0.
    fs::write(root.join("cpu/kubepods/besteffort/cpu.idle"), "1\n").expect("seed");
    NodeQos::new(l.clone(), false, caps, None, None).resync(&[ls.clone(), be.clone()]);
    assert_eq!(cpu_file(root, "kubepods/besteffort", "cpu.idle"), "0");
    let parents_follow = NodeCaps {
        idle_qos_parents: true,
        ..caps
    };
    let node = NodeQos::new(l.clone(), false, parents_follow, None, None);
    node.resync(&[ls.clone(), be.clone()]);
    assert_eq!(cpu_file(root, "kubepods/besteffort", "cpu.idle"), "1");
    assert_eq!(cpu_file(root, "kubepods/burstable", "cpu.idle"), "0");
    assert_eq!(cpu_file(root, "kubepods", "cpu.idle"), "0");
    let before = snapshot(root);
    assert_eq!(applier.apply(&be).status, PodStatus::Unchanged);
    assert_eq!(applier.apply(&ls).status, PodStatus::Unchanged);
    node.resync(&[ls.clone(), be.clone()]);
    assert_eq!(snapshot(root), before, "idempotent");
    // The BE pod is deleted: the besteffort parent has no idle pod below it any more.
    node.resync(&[ls]);
    assert_eq!(cpu_file(root, "kubepods/besteffort", "cpu.idle"), "0");
}

fn resctrl_tree(root: &Path) {
    fs::create_dir_all(root.join("info/L3")).expect("info");
    fs::create_dir_all(root.join("info/MB")).expect("info");
    fs::write(root.join("info/L3/cbm_mask"), "fff\n").expect("mask");
    fs::write(root.join("info/L3/min_cbm_bits"), "1\n").expect("min");
    fs::write(root.join("info/MB/bandwidth_gran"), "10\n").expect("gran");
    fs::write(root.join("info/MB/min_bandwidth"), "10\n").expect("min bw");
    fs::write(root.join("schemata"), "L3:0=fff;1=fff\nMB:0=100;1=100\n").expect("schemata");
    fs::write(root.join("tasks"), "1\n").expect("tasks");
}

fn resctrl(start: i64, end: i64, mba: i64) -> Option<ResolvedResctrlQos> {
    Some(ResolvedResctrlQos {
        enabled: true,
        cat_range_start_percent: start,
        cat_range_end_percent: end,
        mba_percent: mba,
        source: DecisionSource::ClusterConfig,
    })
}

fn write_json(dir: &Path, name: &str, pod: &Pod) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, serde_json::to_string(pod).expect("json")).expect("write pod");
    p
}

#[test]
fn resctrl_via_once_two_domains_then_node_pass_cleans_deleted_pod() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cg = tmp.path().join("cg");
    let rc = tmp.path().join("resctrl");
    resctrl_tree(&rc);
    let l = layout(&cg, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let be_pod = edit(fixture("be-transcode.json"), |q| {
        q.qos_class = QosClass::Be;
        q.resctrl_qos = resctrl(0, 30, 35);
    });
    let ls_pod = edit(fixture("ls-redis.json"), |q| {
        q.resctrl_qos = resctrl(0, 100, 100)
    });
    let be = PodSpecView::from_pod(&be_pod).expect("be");
    let ls = PodSpecView::from_pod(&ls_pod).expect("ls");
    make_pod_tree(&l, Kernel::AlibabaV1, &be);
    make_pod_tree(&l, Kernel::AlibabaV1, &ls);
    // The threads of each container (v1 `tasks`; thread IDs, not only the leaders).
    for (rel, tids) in [
        (format!("{BE_POD}/{FFMPEG}"), "200\n201\n"),
        (format!("{BE_POD}/{UPLOADER}"), "210\n"),
        (format!("{LS_POD}/{REDIS}"), "100\n"),
        (format!("{LS_POD}/{EXPORTER}"), "110\n"),
    ] {
        fs::write(cg.join("cpu").join(rel).join("tasks"), tids).expect("tasks");
    }
    let run = |file: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
            .args(["once", "-f"])
            .arg(file)
            .args(["--cgroup-version", "v1", "--cgroup-driver", "cgroupfs"])
            .arg("--cgroup-root")
            .arg(&cg)
            .arg("--resctrl-root")
            .arg(&rc)
            .output()
            .expect("run binary");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), json)
    };
    let (code, json) = run(&write_json(tmp.path(), "be.json", &be_pod));
    assert_eq!(code, Some(0), "{json:#}");
    assert_eq!(json["resctrl"]["groupsCreated"], 1, "{json:#}");
    assert_eq!(json["resctrl"]["tasksAdded"], 3);
    // 12 ways, 0..30% -> floor(3.6) = the lowest 3 ways (0x7) on both domains; MBA 35% -> 40
    // (10% steps).
    assert_eq!(
        fs::read_to_string(rc.join("koord-BE/schemata")).expect("be"),
        "L3:0=7;1=7\nMB:0=40;1=40\n"
    );
    assert_eq!(
        fs::read_to_string(rc.join("koord-BE/tasks")).expect("tasks"),
        "200\n201\n210\n"
    );
    let (code, json) = run(&write_json(tmp.path(), "ls.json", &ls_pod));
    assert_eq!(code, Some(0), "{json:#}");
    assert_eq!(
        fs::read_to_string(rc.join("koord-LS/schemata")).expect("ls"),
        "L3:0=fff;1=fff\nMB:0=100;1=100\n"
    );
    assert_eq!(
        fs::read_to_string(rc.join("koord-LS/tasks")).expect("tasks"),
        "100\n110\n"
    );
    // `once` sees one pod: it never moves the other class's tasks out.
    assert_eq!(
        fs::read_to_string(rc.join("koord-BE/tasks")).expect("tasks"),
        "200\n201\n210\n"
    );
    // Idempotent: the same pod again writes nothing.
    let (_, json) = run(&write_json(tmp.path(), "be.json", &be_pod));
    assert_eq!(json["resctrl"]["schemataWritten"], 0);
    assert_eq!(json["resctrl"]["tasksAdded"], 0);

    // The node pass (run's resync) with the BE pod deleted: its tasks go back to the default
    // group; the LS group is left as it is.
    let metrics = std::sync::Arc::new(Metrics::new().expect("metrics"));
    let support = detect_resctrl(&rc, Some(&metrics)).expect("supported");
    let node = NodeQos::new(
        l,
        false,
        NodeCaps::default(),
        Some((rc.clone(), support)),
        Some(metrics.clone()),
    );
    let nr = node.resync(std::slice::from_ref(&ls));
    let r = nr.resctrl.expect("resctrl pass");
    assert_eq!(
        (r.tasks_removed, r.tasks_added, r.schemata_written),
        (3, 0, 0)
    );
    assert_eq!(
        fs::read_to_string(rc.join("tasks")).expect("root tasks"),
        "1\n200\n201\n210\n"
    );
    let text = metrics.render();
    for needle in [
        "koord_applier_resctrl_supported 1",
        "koord_applier_resctrl_tasks_moved_total{direction=\"removed\"} 3",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

#[test]
fn resctrl_unsupported_is_detected_and_reported_as_a_gauge() {
    let tmp = tempfile::tempdir().expect("tmp");
    let metrics = Metrics::new().expect("metrics");
    assert!(detect_resctrl(&tmp.path().join("absent"), Some(&metrics)).is_none());
    // Mounted but neither L3 CAT nor MBA.
    fs::write(tmp.path().join("schemata"), "").expect("schemata");
    assert!(detect_resctrl(tmp.path(), Some(&metrics)).is_none());
    assert!(
        metrics
            .render()
            .contains("koord_applier_resctrl_supported 0")
    );
}

/// cgroup v2: the fallback is refused (the kubelet reads an idle cgroup's `cpu.weight` 0 as
/// ~1.8e15 CPUs used); a BE pod keeps its batch weight, and a `cpu.idle = 1` that an earlier
/// release left on the pod or on `kubepods/besteffort` is put back to 0.
#[test]
fn cpu_idle_fallback_refused_on_v2_and_leftover_idle_reset() {
    for fallback in [true, false] {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        let l = layout(root, CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let (ls, be) = pods();
        make_pod_tree(&l, Kernel::MainlineV2, &ls);
        make_pod_tree(&l, Kernel::MainlineV2, &be);
        // The idle tree the earlier release made: the BE pod and besteffort idle.
        let be_pod = root.join(l.pod_dir(&be.uid, be.kube_qos).expect("pod dir"));
        let ls_pod = root.join(l.pod_dir(&ls.uid, ls.kube_qos).expect("pod dir"));
        let qos = |q| root.join(l.qos_dir(q).expect("qos dir"));
        for (dir, v) in [
            (be_pod.clone(), "1"),
            (ls_pod.clone(), "0"),
            (qos(KubeQos::BestEffort), "1"),
            (qos(KubeQos::Burstable), "0"),
            (root.join(l.kubepods_dir()), "0"),
        ] {
            fs::write(dir.join("cpu.idle"), format!("{v}\n")).expect("seed cpu.idle");
        }
        let caps = detect_caps(&l, fallback, true);
        assert!(
            !caps.uses_cpu_idle() && caps.cpu_idle_reset(),
            "fallback={fallback}: {caps:?}"
        );
        let applier = Applier::new(l.clone(), false, None).with_caps(caps);
        let r = applier.apply(&be);
        assert!(
            r.knobs.iter().any(|k| k.file == "cpu.weight"),
            "the batch weight stays: {r:#?}"
        );
        let idle: Vec<_> = r.knobs.iter().filter(|k| k.file == "cpu.idle").collect();
        assert_eq!(idle.len(), 1, "the pod only: {idle:#?}");
        assert_eq!(idle[0].outcome, Outcome::Written);
        assert_eq!(read(&be_pod.join("cpu.idle")), "0");
        applier.apply(&ls);
        let nr = NodeQos::new(l.clone(), false, caps, None, None).resync(&[ls.clone(), be.clone()]);
        assert_eq!(
            read(&qos(KubeQos::BestEffort).join("cpu.idle")),
            "0",
            "{nr:#?}"
        );
        assert_eq!(read(&qos(KubeQos::Burstable).join("cpu.idle")), "0");
        let before = snapshot(root);
        assert_eq!(applier.apply(&be).status, PodStatus::Unchanged);
        NodeQos::new(l, false, caps, None, None).resync(&[ls, be]);
        assert_eq!(snapshot(root), before, "idempotent");
    }
}
