//! The applier on temporary trees laid out like cgroup v2 (systemd and cgroupfs drivers;
//! containerd, CRI-O and Docker IDs), like Alibaba Cloud Linux v1, and like mainline v1.

use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::events::{REASON_APPLIED, REASON_REFUSED, event_for};
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use common::{Kernel, fixture, layout, make_pod_tree, read, snapshot, with_runtime};

const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const FF: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn view(name: &str, scheme: &str) -> PodSpecView {
    PodSpecView::from_pod(&with_runtime(fixture(name), scheme)).expect("view")
}

#[test]
fn v2_systemd_containerd_every_knob_then_idempotent() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let applier = Applier::new(l, false, None);
    let r = applier.apply(&v);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    let pod = tmp.path().join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice");
    let redis = pod.join(format!("cri-containerd-{REDIS}.scope"));
    for (path, want) in [
        (pod.join("memory.min"), "73400320"),
        (pod.join("memory.low"), "73400320"),
        (pod.join("memory.oom.group"), "0"),
        (pod.join("memory.high"), "max"),
        (redis.join("memory.min"), "52428800"),
        (redis.join("memory.low"), "52428800"),
        (redis.join("memory.high"), "83886080"),
        (redis.join("memory.oom.group"), "0"),
    ] {
        assert_eq!(read(&path), want, "{}", path.display());
    }
    // Mainline v2 has no Alibaba files: reported unsupported, never created.
    for f in [
        "memory.wmark_ratio",
        "memory.wmark_scale_factor",
        "memory.wmark_min_adj",
        "memory.priority",
        "memory.use_priority_oom",
    ] {
        assert!(!redis.join(f).exists(), "{f} must not be created");
        assert!(
            r.knobs
                .iter()
                .any(|k| k.file == f && k.outcome == Outcome::Unsupported),
            "{f} unsupported"
        );
    }
    assert_eq!(
        applier.unsupported_knobs(),
        vec![
            "memory.priority",
            "memory.use_priority_oom",
            "memory.wmark_min_adj",
            "memory.wmark_ratio",
            "memory.wmark_scale_factor"
        ]
    );
    // pod: min, low written (oom.group already 0); each container: min, low, high.
    assert_eq!(r.count(Outcome::Written), 2 + 3 + 3);
    let again = applier.apply(&v);
    assert_eq!(
        again.count(Outcome::Written),
        0,
        "second pass writes nothing"
    );
    assert_eq!(again.status, PodStatus::Unchanged);
    assert_eq!(event_for(&again), None, "no event per resync");
}

#[test]
fn v2_golden_applied_event_text() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let ev = event_for(&Applier::new(l, false, None).apply(&v)).expect("event");
    assert_eq!(ev.reason, REASON_APPLIED);
    assert_eq!(
        ev.message,
        "cgroup v2: pod memory.min=73400320 memory.low=73400320 memory.oom.group=0; \
         exporter memory.min=20971520 memory.low=20971520 memory.high=33554432 memory.oom.group=0; \
         redis memory.min=52428800 memory.low=52428800 memory.high=83886080 memory.oom.group=0; \
         unsupported on this node: memory.priority memory.use_priority_oom memory.wmark_min_adj memory.wmark_ratio memory.wmark_scale_factor"
    );
}

#[test]
fn v2_cgroupfs_batch_on_crio_and_docker() {
    for (scheme, leaf) in [
        ("cri-o", format!("crio-{FF}")),
        ("docker", FF.to_owned()),
        ("containerd", FF.to_owned()),
    ] {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let v = view("be-transcode.json", scheme);
        make_pod_tree(&l, Kernel::MainlineV2, &v);
        let r = Applier::new(l, false, None).apply(&v);
        assert_eq!(r.status, PodStatus::Applied, "{scheme}: {r:#?}");
        let pod = tmp
            .path()
            .join("kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed");
        let ff = pod.join(&leaf);
        for (path, want) in [
            (
                pod.join("cpu.weight"),
                koord_api::knobs::shares_to_weight(72_192).to_string(),
            ),
            (pod.join("cpu.max"), "7100000 100000".to_owned()),
            (pod.join("memory.max"), "24696061952".to_owned()),
            (ff.join("cpu.weight"), "2735".to_owned()),
            (ff.join("cpu.max"), "7000000 100000".to_owned()),
            (ff.join("memory.max"), "23622320128".to_owned()),
            (ff.join("memory.high"), "max".to_owned()),
        ] {
            assert_eq!(read(&path), want, "{scheme} {}", path.display());
        }
    }
}

#[test]
fn alibaba_v1_every_knob_and_wmark_high_read_back() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::AlibabaV1, &v);
    let applier = Applier::new(l, false, None);
    let r = applier.apply(&v);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    let pod = tmp.path().join("memory/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice");
    let redis = pod.join(format!("cri-containerd-{REDIS}.scope"));
    for (path, want) in [
        (pod.join("memory.min"), "73400320"),
        (pod.join("memory.wmark_ratio"), "95"),
        (pod.join("memory.wmark_scale_factor"), "20"),
        (pod.join("memory.wmark_min_adj"), "-25"),
        (redis.join("memory.min"), "52428800"),
        (redis.join("memory.low"), "52428800"),
        (redis.join("memory.high"), "83886080"),
        (redis.join("memory.wmark_ratio"), "95"),
        (redis.join("memory.wmark_scale_factor"), "20"),
        (redis.join("memory.wmark_min_adj"), "-25"),
        (redis.join("memory.priority"), "0"),
        (redis.join("memory.use_priority_oom"), "0"),
        (redis.join("memory.oom.group"), "0"),
        // read-only: never written
        (redis.join("memory.wmark_high"), "9223372036854771712"),
    ] {
        assert_eq!(read(&path), want, "{}", path.display());
    }
    assert!(applier.unsupported_knobs().is_empty());
    assert_eq!(
        r.read_back["redis"]["memory.wmark_high"],
        "9223372036854771712"
    );
    let ev = event_for(&r).expect("event");
    assert!(
        ev.message
            .contains("memory.wmark_high=9223372036854771712 (read)"),
        "{}",
        ev.message
    );
    assert!(
        ev.message.starts_with("cgroup v1: pod memory.min=73400320"),
        "{}",
        ev.message
    );
    assert_eq!(
        applier.apply(&v).count(Outcome::Written),
        0,
        "idempotent on v1 too"
    );
}

#[test]
fn mainline_v1_batch_and_unsupported_memory_qos() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let v = view("be-transcode.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV1, &v);
    let applier = Applier::new(l, false, None);
    let r = applier.apply(&v);
    let pod = "kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed";
    assert_eq!(
        read(&tmp.path().join(format!("cpu/{pod}/{FF}/cpu.shares"))),
        "71680"
    );
    assert_eq!(
        read(&tmp.path().join(format!("cpu/{pod}/{FF}/cpu.cfs_quota_us"))),
        "7000000"
    );
    assert_eq!(
        read(
            &tmp.path()
                .join(format!("memory/{pod}/{FF}/memory.limit_in_bytes"))
        ),
        "23622320128"
    );
    assert!(applier.unsupported_knobs().contains(&"memory.wmark_ratio"));
    assert!(applier.unsupported_knobs().contains(&"memory.min"));
    assert_eq!(r.status, PodStatus::Applied);
}

#[test]
fn mainline_v1_ls_pod_gets_one_event_naming_what_the_kernel_lacks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let v = view("ls-redis.json", "containerd");
    let before = {
        make_pod_tree(&l, Kernel::MainlineV1, &v);
        snapshot(tmp.path())
    };
    let applier = Applier::new(l, false, None);
    let r = applier.apply(&v);
    assert!(
        r.knobs.iter().all(|k| k.outcome == Outcome::Unsupported),
        "{r:#?}"
    );
    assert_eq!(r.status, PodStatus::Unchanged, "nothing written");
    assert_eq!(snapshot(tmp.path()), before);
    let ev = event_for(&r).expect("an Event on the first pass");
    assert_eq!(ev.reason, REASON_APPLIED);
    assert!(
        ev.message
            .contains("unsupported on this node: memory.high memory.low memory.min"),
        "{}",
        ev.message
    );
    assert_eq!(
        event_for(&applier.apply(&v)),
        None,
        "not again at the resync"
    );
}

#[test]
fn drift_is_repaired_at_next_pass() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let applier = Applier::new(l, false, None);
    applier.apply(&v);
    let high = tmp
        .path()
        .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice")
        .join(format!("cri-containerd-{REDIS}.scope/memory.high"));
    std::fs::write(&high, "max\n").expect("someone else writes");
    let r = applier.apply(&v);
    assert_eq!(r.count(Outcome::Written), 1);
    let k = r
        .knobs
        .iter()
        .find(|k| k.outcome == Outcome::Written)
        .expect("one write");
    assert_eq!(
        (k.file, k.old.as_deref(), k.new.as_str()),
        ("memory.high", Some("max"), "83886080")
    );
    assert_eq!(read(&high), "83886080");
}

#[test]
fn none_policy_resets_to_reset_values() {
    for (version, kernel) in [
        (CgroupVersion::V2, Kernel::MainlineV2),
        (CgroupVersion::V1, Kernel::AlibabaV1),
    ] {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = layout(tmp.path(), version, CgroupDriver::Cgroupfs);
        let enabled = view("ls-redis.json", "containerd");
        make_pod_tree(&l, kernel, &enabled);
        let applier = Applier::new(l.clone(), false, None);
        applier.apply(&enabled);
        let none = view("ls-redis-none.json", "containerd");
        let r = applier.apply(&none);
        assert_eq!(r.status, PodStatus::Applied);
        let mem = |rel: &str| match version {
            CgroupVersion::V1 => tmp.path().join("memory").join(rel),
            CgroupVersion::V2 => tmp.path().join(rel),
        };
        let c = format!("kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab/{REDIS}");
        let unlimited = if version == CgroupVersion::V2 {
            "max"
        } else {
            "9223372036854775807"
        };
        assert_eq!(read(&mem(&format!("{c}/memory.min"))), "0", "{version}");
        assert_eq!(read(&mem(&format!("{c}/memory.low"))), "0");
        assert_eq!(read(&mem(&format!("{c}/memory.high"))), unlimited);
        if kernel == Kernel::AlibabaV1 {
            for (f, want) in [
                ("memory.wmark_ratio", "0"),
                ("memory.wmark_scale_factor", "50"),
                ("memory.wmark_min_adj", "0"),
            ] {
                assert_eq!(read(&mem(&format!("{c}/{f}"))), want, "{f}");
            }
        }
        assert_eq!(
            read(&mem(
                "kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab/memory.min"
            )),
            "0"
        );
    }
}

#[test]
fn forged_annotation_is_refused_whole_and_nothing_changes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let mut pod = fixture("ls-redis.json");
    make_pod_tree(
        &l,
        Kernel::MainlineV2,
        &PodSpecView::from_pod(&pod).expect("view"),
    );
    let before = snapshot(tmp.path());
    let ann = pod.metadata.annotations.as_mut().expect("annotations");
    let forged = ann["koordinator.sh/resolved-qos"].replacen(
        "\"memory.min\":52428800",
        "\"memory.min\":1073741824",
        1,
    );
    ann.insert("koordinator.sh/resolved-qos".into(), forged);
    let r = Applier::new(l.clone(), false, None).apply(&PodSpecView::from_pod(&pod).expect("view"));
    assert_eq!(r.status, PodStatus::Refused);
    assert!(r.knobs.iter().all(|k| k.outcome == Outcome::Refused) && !r.knobs.is_empty());
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "a refused pod writes nothing, not even the valid knobs"
    );
    let ev = event_for(&r).expect("warning");
    assert_eq!(ev.reason, REASON_REFUSED);
    assert_eq!(
        ev.message,
        "koordinator.sh/resolved-qos refused, nothing written: memoryQOS.containers[\"redis\"].memory.min = 1073741824 is above the container's memory request 52428800"
    );
}

#[test]
fn path_traversal_in_container_id_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let l = layout(&root, CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let good = fixture("ls-redis.json");
    make_pod_tree(
        &l,
        Kernel::MainlineV2,
        &PodSpecView::from_pod(&good).expect("view"),
    );
    // A victim file outside the root that a traversal would reach.
    std::fs::write(tmp.path().join("memory.min"), "untouched").expect("victim");
    let before = snapshot(tmp.path());
    let mut evil = good;
    let cs = evil
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .expect("statuses");
    cs[1].container_id = Some("containerd://../../../..".into());
    let r = Applier::new(l, false, None).apply(&PodSpecView::from_pod(&evil).expect("view"));
    assert_eq!(r.status, PodStatus::Refused);
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .contains("has characters other than ASCII letters and digits"),
        "{r:?}"
    );
    assert_eq!(snapshot(tmp.path()), before);
    assert_eq!(read(&tmp.path().join("memory.min")), "untouched");
}

#[test]
fn unannotated_pod_is_not_touched_and_dry_run_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let plain = PodSpecView::from_pod(&fixture("unannotated.json")).expect("view");
    make_pod_tree(&l, Kernel::MainlineV2, &plain);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let before = snapshot(tmp.path());
    let r = Applier::new(l.clone(), false, None).apply(&plain);
    assert_eq!((r.status, r.knobs.len()), (PodStatus::Unmanaged, 0));
    let dry = Applier::new(l, true, None).apply(&v);
    assert_eq!(
        dry.count(Outcome::Written),
        8,
        "the plan shows what would be written"
    );
    assert_eq!(snapshot(tmp.path()), before, "neither wrote a byte");
}

#[test]
fn missing_cgroup_is_not_an_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    let r = Applier::new(l, false, None).apply(&v);
    assert!(
        r.knobs.iter().all(|k| k.outcome == Outcome::Missing),
        "{r:#?}"
    );
    assert_eq!(r.status, PodStatus::Unchanged);
    assert_eq!(event_for(&r), None);
}

#[test]
fn metrics_count_outcomes_and_unsupported_once() {
    use std::sync::Arc;
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view("ls-redis.json", "containerd");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let metrics = Arc::new(koord_applier::metrics::Metrics::new().expect("metrics"));
    let applier = Applier::new(l, false, Some(metrics.apply.clone()));
    applier.apply(&v);
    applier.apply(&v);
    let text = metrics.render();
    for needle in [
        "koord_applier_cgroup_writes_total{knob=\"memory.high\",outcome=\"written\"} 2",
        "koord_applier_cgroup_writes_total{knob=\"memory.high\",outcome=\"unchanged\"} 2",
        // 3 cgroups x 2 passes: every pass reports the knob, the kernel was asked once.
        "koord_applier_cgroup_writes_total{knob=\"memory.wmark_ratio\",outcome=\"unsupported\"} 6",
        "koord_applier_unsupported_knobs{knob=\"memory.wmark_ratio\"} 1",
        "koord_applier_reconcile_duration_seconds_count 2",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
