//! Tables for [`super::validate`] and [`super::build`] on the fixture pods.

use super::*;
use crate::cgroup::{CgroupDriver, CgroupVersion};
use k8s_openapi::api::core::v1::Pod;

// The applier's pod fixtures: the same pods its integration tests pass end to end.
const LS: &str = include_str!("../../../applier/tests/fixtures/ls-redis.json");
const BE: &str = include_str!("../../../applier/tests/fixtures/be-transcode.json");

fn view(json: &str) -> (ResolvedQos, PodSpecView) {
    let pod: Pod = serde_json::from_str(json).expect("fixture");
    let v = PodSpecView::from_pod(&pod).expect("view");
    let q = ResolvedQos::from_annotation(v.resolved_qos.as_deref().expect("annotated"))
        .expect("contract");
    (q, v)
}

#[test]
fn fixtures_are_valid() {
    for f in [LS, BE] {
        let (q, v) = view(f);
        validate(&q, &v).expect("the webhook's numbers pass");
    }
}

#[test]
fn forged_values_are_refused_naming_field_and_bound() {
    type Forge = fn(&mut ResolvedQos);
    let cases: Vec<(&str, Forge, &str)> = vec![
        (
            LS,
            |q| q.memory_qos.containers.get_mut("redis").expect("redis").min = 52_428_801,
            "memoryQOS.containers[\"redis\"].memory.min = 52428801 is above the container's memory request 52428800",
        ),
        (
            LS,
            |q| q.memory_qos.containers.get_mut("redis").expect("redis").low = 60_000_000,
            "memoryQOS.containers[\"redis\"].memory.low = 60000000 is above the container's memory request 52428800",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("redis")
                    .expect("redis")
                    .high = MaxOr::Bytes(104_857_601)
            },
            "memoryQOS.containers[\"redis\"].memory.high = 104857601 is above the container's memory limit 104857600",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("redis")
                    .expect("redis")
                    .high = MaxOr::Bytes(4096)
            },
            "memoryQOS.containers[\"redis\"].memory.high = 4096 is below its memory.min 52428800",
        ),
        (
            LS,
            |q| q.memory_qos.containers.get_mut("redis").expect("redis").min = -1,
            "memoryQOS.containers[\"redis\"].memory.min = -1 is outside 0..=9223372036854775807",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .wmark_ratio = 101
            },
            "memoryQOS.containers[\"exporter\"].memory.wmark_ratio = 101 is outside 0..=100",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .wmark_scale_factor = 0
            },
            "memoryQOS.containers[\"exporter\"].memory.wmark_scale_factor = 0 is outside 1..=1000",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .wmark_min_adj = -26
            },
            "memoryQOS.containers[\"exporter\"].memory.wmark_min_adj = -26 is outside -25..=50",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .priority = 13
            },
            "memoryQOS.containers[\"exporter\"].memory.priority = 13 is outside 0..=12",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .use_priority_oom = 2
            },
            "memoryQOS.containers[\"exporter\"].memory.use_priority_oom = 2 is outside 0..=1",
        ),
        (
            LS,
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("exporter")
                    .expect("exporter")
                    .oom_group = 2
            },
            "memoryQOS.containers[\"exporter\"].memory.oom.group = 2 is outside 0..=1",
        ),
        (
            LS,
            |q| q.memory_qos.params.wmark_ratio = 200,
            "memoryQOS.params.wmarkRatio = 200 is outside 0..=100",
        ),
        (
            LS,
            |q| q.memory_qos.pod.min = 73_400_321,
            "memoryQOS.pod.memory.min = 73400321 is above the pod's memory request 73400320",
        ),
        (
            LS,
            |q| {
                let k = q.memory_qos.containers["redis"];
                q.memory_qos.containers.insert("ghost".into(), k);
            },
            "memoryQOS.containers[\"ghost\"]: the pod spec has no such container",
        ),
        (
            LS,
            |q| {
                let knobs = BatchKnobs {
                    cpu_shares: 2,
                    cpu_cfs_quota_us: -1,
                    memory_limit_in_bytes: -1,
                };
                q.batch = Some(koord_api::ResolvedBatch {
                    pod: knobs,
                    containers: Default::default(),
                });
            },
            "batch is set but the pod spec has no kubernetes.io/batch-cpu or batch-memory resources",
        ),
        (
            BE,
            |q| batch_c(q, "ffmpeg").cpu_shares = 71_681,
            "batch.containers[\"ffmpeg\"].cpu.shares = 71681 is above the shares of the batch-cpu request, 71680",
        ),
        (
            BE,
            |q| batch_c(q, "ffmpeg").cpu_shares = 1,
            "batch.containers[\"ffmpeg\"].cpu.shares = 1 is outside 2..=262144",
        ),
        (
            BE,
            |q| batch_c(q, "ffmpeg").cpu_cfs_quota_us = -1,
            "batch.containers[\"ffmpeg\"].cpu.cfs_quota_us = -1 (unlimited) but the batch-cpu limit is 70000m",
        ),
        (
            BE,
            |q| batch_c(q, "uploader").cpu_cfs_quota_us = 100_001,
            "batch.containers[\"uploader\"].cpu.cfs_quota_us = 100001 is above the quota of the batch-cpu limit, 100000",
        ),
        (
            BE,
            |q| batch_c(q, "uploader").cpu_cfs_quota_us = 999,
            "batch.containers[\"uploader\"].cpu.cfs_quota_us = 999 is outside 1000..=9223372036854775807",
        ),
        (
            BE,
            |q| batch_c(q, "uploader").memory_limit_in_bytes = 1_073_741_825,
            "batch.containers[\"uploader\"].memory.limit_in_bytes = 1073741825 is above the batch-memory limit 1073741824",
        ),
        (
            BE,
            |q| batch_c(q, "uploader").memory_limit_in_bytes = -1,
            "batch.containers[\"uploader\"].memory.limit_in_bytes = -1 (unlimited) but the batch-memory limit is 1073741824",
        ),
        (
            BE,
            |q| q.batch.as_mut().expect("batch").pod.memory_limit_in_bytes = 24_696_061_953,
            "batch.pod.memory.limit_in_bytes = 24696061953 is above the batch-memory limit 24696061952",
        ),
        (
            BE,
            |q| q.batch.as_mut().expect("batch").pod.cpu_shares = 72_193,
            "batch.pod.cpu.shares = 72193 is above the shares of the batch-cpu request, 72192",
        ),
    ];
    for (fixture, forge, want) in cases {
        let (mut q, v) = view(fixture);
        forge(&mut q);
        let got = validate(&q, &v).expect_err(want);
        assert_eq!(got.reason, want);
        let layout = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Systemd);
        assert!(
            plan(&q, &v, &layout, NodeCaps::default()).is_err(),
            "plan must refuse too: {want}"
        );
    }
}

fn batch_c<'a>(q: &'a mut ResolvedQos, name: &str) -> &'a mut BatchKnobs {
    q.batch
        .as_mut()
        .and_then(|b| b.containers.get_mut(name))
        .expect("batch container")
}

#[test]
fn lowering_batch_values_is_allowed() {
    let (mut q, v) = view(BE);
    batch_c(&mut q, "ffmpeg").cpu_shares = 2;
    batch_c(&mut q, "ffmpeg").cpu_cfs_quota_us = 1000;
    batch_c(&mut q, "ffmpeg").memory_limit_in_bytes = 4096;
    validate(&q, &v).expect("a pod may restrict itself");
}

#[test]
fn build_paths_and_values_v1_cgroupfs() {
    let (q, v) = view(BE);
    let layout = Layout::new("/cg", CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("plan");
    let pod_dir = "kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed";
    let ff = "1111111111111111111111111111111111111111111111111111111111111111";
    let find = |target: &Target, file: &str| {
        p.writes
            .iter()
            .find(|w| &w.target == target && w.file == file)
            .map(|w| (w.path().display().to_string(), w.text.clone()))
            .unwrap_or_else(|| panic!("{target} {file} missing"))
    };
    let ffmpeg = Target::Container("ffmpeg".into());
    let cases = [
        (
            &Target::Pod,
            "cpu.shares",
            format!("/cg/cpu/{pod_dir}/cpu.shares"),
            "72192",
        ),
        (
            &Target::Pod,
            "cpu.cfs_quota_us",
            format!("/cg/cpu/{pod_dir}/cpu.cfs_quota_us"),
            "7100000",
        ),
        (
            &Target::Pod,
            "memory.limit_in_bytes",
            format!("/cg/memory/{pod_dir}/memory.limit_in_bytes"),
            "24696061952",
        ),
        (
            &Target::Pod,
            "memory.wmark_scale_factor",
            format!("/cg/memory/{pod_dir}/memory.wmark_scale_factor"),
            "50",
        ),
        (
            &ffmpeg,
            "cpu.shares",
            format!("/cg/cpu/{pod_dir}/{ff}/cpu.shares"),
            "71680",
        ),
        (
            &ffmpeg,
            "memory.high",
            format!("/cg/memory/{pod_dir}/{ff}/memory.high"),
            "9223372036854775807",
        ),
        (
            &ffmpeg,
            "memory.limit_in_bytes",
            format!("/cg/memory/{pod_dir}/{ff}/memory.limit_in_bytes"),
            "23622320128",
        ),
    ];
    for (target, file, path, text) in cases {
        assert_eq!(
            find(target, file),
            (path, text.to_owned()),
            "{target} {file}"
        );
    }
    // 8 pod memory + 3 pod batch + 2 x (9 memory + 3 batch).
    assert_eq!(p.writes.len(), 8 + 3 + 2 * 12);
    assert_eq!(p.wmark_high.len(), 2);
}

#[test]
fn containers_without_ids_are_pending_and_bad_ids_refused() {
    let (q, mut v) = view(LS);
    let layout = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Systemd);
    v.containers[1].container_id = None;
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("plan");
    assert_eq!(p.pending, vec!["exporter".to_owned()]);
    assert!(
        p.writes
            .iter()
            .all(|w| w.target != Target::Container("exporter".into()))
    );
    v.containers[0].container_id = Some("containerd://../../../../etc".into());
    let err = plan(&q, &v, &layout, NodeCaps::default()).expect_err("traversal");
    assert!(
        err.reason.contains("container \"redis\"")
            && err.reason.contains("ASCII letters and digits"),
        "{}",
        err.reason
    );
    v.uid = "../../x".into();
    assert!(plan(&q, &v, &layout, NodeCaps::default()).is_err());
}

fn with_cpu(json: &str, enabled: bool, gi: i64) -> (ResolvedQos, PodSpecView) {
    let (mut q, v) = view(json);
    q.cpu_qos = Some(ResolvedCpuQos {
        enabled,
        group_identity: gi,
        source: koord_api::DecisionSource::ClusterConfig,
    });
    (q, v)
}

fn cpu_writes(p: &Plan) -> Vec<(String, &'static str, String)> {
    p.writes
        .iter()
        .filter(|w| matches!(w.knob, Knob::CpuBvtWarpNs | Knob::CpuIdle))
        .map(|w| (w.target.to_string(), w.file, w.text.clone()))
        .collect()
}

#[test]
fn group_identity_range_is_checked_naming_the_field() {
    for gi in -1..=2 {
        let (q, v) = with_cpu(LS, true, gi);
        validate(&q, &v).unwrap_or_else(|e| panic!("{gi} is valid: {e}"));
    }
    for (gi, want) in [
        (3, "cpuQOS.groupIdentity = 3 is outside -1..=2"),
        (-2, "cpuQOS.groupIdentity = -2 is outside -1..=2"),
        (
            i64::MAX,
            "cpuQOS.groupIdentity = 9223372036854775807 is outside -1..=2",
        ),
    ] {
        // Even a disabled section is refused: the value is forged either way.
        for enabled in [true, false] {
            let (q, v) = with_cpu(LS, enabled, gi);
            assert_eq!(validate(&q, &v).map_err(|e| e.reason), Err(want.to_owned()));
        }
    }
}

#[test]
fn group_identity_values_and_defaults_table() {
    let l = Layout::new("/cg", CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let bvt = NodeCaps::default();
    assert_eq!(
        bvt,
        NodeCaps {
            bvt_warp_ns: true,
            cpu_idle_fallback: false,
            idle_qos_parents: false,
            cpu_idle: false,
        },
        "undetected: plan group identity, the fallback is off"
    );
    // (enabled, resolved group identity) -> the value every cgroup of the pod gets.
    for (enabled, gi, want) in [
        (true, 2, "2"),
        (true, 1, "1"),
        (true, 0, "0"),
        (true, -1, "-1"),
        (false, 2, "0"),
        (false, -1, "0"),
    ] {
        let (q, v) = with_cpu(LS, enabled, gi);
        let p = plan(&q, &v, &l, bvt).expect("plan");
        let got = cpu_writes(&p);
        let want_rows: Vec<(String, &str, String)> = ["pod", "exporter", "redis"]
            .iter()
            .map(|t| ((*t).to_owned(), "cpu.bvt_warp_ns", want.to_owned()))
            .collect();
        assert_eq!(got, want_rows, "enabled={enabled} gi={gi}");
        for w in p.writes.iter().filter(|w| w.knob == Knob::CpuBvtWarpNs) {
            assert!(w.dir.starts_with("/cg/cpu/kubepods"), "{}", w.dir.display());
        }
    }
    // No cpuQOS section: no CPU QoS writes at all.
    let (q, v) = view(LS);
    assert!(cpu_writes(&plan(&q, &v, &l, bvt).expect("plan")).is_empty());
}

#[test]
fn cpu_idle_fallback_table() {
    let l = Layout::new("/cg", CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let mainline = |fallback| NodeCaps {
        bvt_warp_ns: false,
        cpu_idle_fallback: fallback,
        ..NodeCaps::default()
    };
    let with_fallback_on_alibaba = NodeCaps {
        bvt_warp_ns: true,
        cpu_idle_fallback: true,
        ..NodeCaps::default()
    };
    // (fixture, group identity, caps) -> CPU QoS writes; pod cpu.shares planned?
    type Row = (
        &'static str,
        i64,
        NodeCaps,
        Vec<(&'static str, &'static str, &'static str)>,
        bool,
    );
    let rows: Vec<Row> = vec![
        (
            BE,
            -1,
            mainline(true),
            vec![("pod", "cpu.idle", "1")],
            false,
        ),
        (BE, 0, mainline(true), vec![("pod", "cpu.idle", "0")], true),
        (LS, 2, mainline(true), vec![("pod", "cpu.idle", "0")], false),
        // Fallback off: group identity is planned and the kernel reports it unsupported.
        (
            BE,
            -1,
            mainline(false),
            vec![
                ("pod", "cpu.bvt_warp_ns", "-1"),
                ("ffmpeg", "cpu.bvt_warp_ns", "-1"),
                ("uploader", "cpu.bvt_warp_ns", "-1"),
            ],
            true,
        ),
        // Group identity present: the fallback is not used.
        (
            BE,
            -1,
            with_fallback_on_alibaba,
            vec![
                ("pod", "cpu.bvt_warp_ns", "-1"),
                ("ffmpeg", "cpu.bvt_warp_ns", "-1"),
                ("uploader", "cpu.bvt_warp_ns", "-1"),
            ],
            true,
        ),
    ];
    for (fixture, gi, caps, want, pod_shares) in rows {
        let (q, v) = with_cpu(fixture, true, gi);
        let p = plan(&q, &v, &l, caps).expect("plan");
        let want: Vec<(String, &str, String)> = want
            .into_iter()
            .map(|(t, f, x)| (t.to_owned(), f, x.to_owned()))
            .collect();
        assert_eq!(cpu_writes(&p), want, "gi={gi} {caps:?}");
        let shares = p
            .writes
            .iter()
            .any(|w| w.target == Target::Pod && w.knob == Knob::CpuShares);
        assert_eq!(
            shares, pod_shares,
            "pod cpu.shares planned, gi={gi} {caps:?}"
        );
        // cpu.idle comes before the pod's cpu.shares (1 -> 0 must precede the shares write).
        let pos = |k| {
            p.writes
                .iter()
                .position(|w| w.target == Target::Pod && w.knob == k)
        };
        if let (Some(i), Some(s)) = (pos(Knob::CpuIdle), pos(Knob::CpuShares)) {
            assert!(i < s, "cpu.idle before cpu.shares");
        }
        // Container batch shares stay: only the idle cgroup itself locks its shares.
        if fixture == BE {
            assert!(p.writes.iter().any(
                |w| w.target == Target::Container("ffmpeg".into()) && w.knob == Knob::CpuShares
            ));
        }
    }
}

#[test]
fn parent_group_identity_table() {
    for (votes, want) in [
        (vec![], 0),
        (vec![2], 2),
        (vec![2, 2, 2], 2),
        (vec![-1, -1], -1),
        (vec![2, -1], 0),
        (vec![0, 2], 0),
        (vec![1], 1),
    ] {
        assert_eq!(parent_group_identity(votes.clone()), want, "{votes:?}");
    }
}

/// The LS fixture after an in-place resize of redis: the spec says `spec_mi` (request, limit
/// twice that), the kubelet reports `status_mi` (`None`: no resources in the status).
fn resized_ls(spec_mi: i64, status_mi: Option<i64>) -> (ResolvedQos, PodSpecView) {
    let mut pod: serde_json::Value = serde_json::from_str(LS).expect("fixture");
    let res = |mi: i64| {
        serde_json::json!({"requests": {"cpu": "100m", "memory": format!("{mi}Mi")},
                           "limits": {"memory": format!("{}Mi", 2 * mi)}})
    };
    pod["spec"]["containers"][0]["resources"] = res(spec_mi);
    if let Some(s) = status_mi {
        for cs in pod["status"]["containerStatuses"]
            .as_array_mut()
            .expect("statuses")
        {
            if cs["name"] == "redis" {
                cs["resources"] = res(s);
            }
        }
    }
    view(&pod.to_string())
}

#[test]
fn resize_hold_table() {
    // The fixture's annotation was computed for redis at 50Mi (min = request, high = 80% of
    // the 100Mi limit). (case, spec Mi, status Mi, matched before, valid, held)
    type Case = (&'static str, i64, Option<i64>, bool, bool, bool);
    let cases: &[Case] = &[
        ("not resized", 50, Some(50), false, true, false),
        (
            "up, pending or in progress",
            100,
            Some(50),
            false,
            true,
            false,
        ),
        (
            "up, done, annotation not yet followed",
            100,
            Some(100),
            true,
            true,
            false,
        ),
        (
            "down, in progress: matches the allocated",
            25,
            Some(50),
            false,
            false,
            true,
        ),
        (
            "down, done, matched before",
            25,
            Some(25),
            true,
            false,
            true,
        ),
        (
            "down, done, never matched: a forgery",
            25,
            Some(25),
            false,
            false,
            false,
        ),
        (
            "down, no status resources, never matched",
            25,
            None,
            false,
            false,
            false,
        ),
        (
            "down, no status resources, matched before",
            25,
            None,
            true,
            false,
            true,
        ),
    ];
    for (case, spec, status, before, valid, held) in cases {
        let (q, v) = resized_ls(*spec, *status);
        let verdict = validate(&q, &v);
        assert_eq!(verdict.is_ok(), *valid, "{case}: {verdict:?}");
        let Err(refused) = verdict else { continue };
        let hold = resize_hold(&q, &v, &refused, *before);
        assert_eq!(hold.is_some(), *held, "{case}: {hold:?}");
        if let Some(reason) = hold {
            assert!(
                reason.contains("keeping the values last applied"),
                "{reason}"
            );
        }
    }
}

#[test]
fn a_hold_names_the_resize() {
    let (q, v) = resized_ls(25, Some(50));
    let refused = validate(&q, &v).expect_err("above the spec");
    assert_eq!(
        resize_hold(&q, &v, &refused, false).as_deref(),
        Some(
            "in-place resize not finished: the annotation matches the memory the kubelet has allocated, not yet the spec (\"redis\" memory request 26214400 limit 52428800 (allocated 52428800 / 104857600)); keeping the values last applied"
        )
    );
    let (q, v) = resized_ls(25, Some(25));
    let refused = validate(&q, &v).expect_err("above the spec");
    let reason = resize_hold(&q, &v, &refused, true).expect("held");
    assert!(
        reason.starts_with("the pod was resized and its annotation predates it (memoryQOS.containers[\"redis\"].memory.min = 52428800 is above the container's memory request 26214400)"),
        "{reason}"
    );
}

const MIB: i64 = 1 << 20;
const PROXY_ID: &str = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";

/// The LS fixture with a plain init container (512Mi) and a native sidecar `proxy` (256Mi
/// request, 512Mi limit, running: its ID in `initContainerStatuses`); the annotation gains the
/// proxy's entry and the pod's sums count it, as the webhook resolves such a pod.
fn ls_with_sidecar() -> (ResolvedQos, PodSpecView) {
    let mut pod: serde_json::Value = serde_json::from_str(LS).expect("fixture");
    pod["spec"]["initContainers"] = serde_json::json!([
        {"name": "init-schema", "image": "i", "resources": {"requests": {"memory": "512Mi"}}},
        {"name": "proxy", "image": "p", "restartPolicy": "Always",
         "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "512Mi"}}}]);
    pod["status"]["initContainerStatuses"] = serde_json::json!([
        {"name": "init-schema", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
         "containerID": format!("containerd://{}", "7".repeat(64))},
        {"name": "proxy", "image": "p", "imageID": "", "ready": true, "restartCount": 0,
         "started": true, "containerID": format!("containerd://{PROXY_ID}")}]);
    let (mut q, v) = view(&pod.to_string());
    let mut proxy = q.memory_qos.containers["redis"];
    proxy.min = 256 * MIB;
    proxy.low = 256 * MIB;
    proxy.high = MaxOr::Bytes(512 * MIB * 80 / 100);
    q.memory_qos.containers.insert("proxy".into(), proxy);
    q.memory_qos.pod.min += 256 * MIB;
    q.memory_qos.pod.low += 256 * MIB;
    (q, v)
}

#[test]
fn native_sidecar_is_planned_and_bounded_by_its_own_request() {
    let (q, v) = ls_with_sidecar();
    let layout = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("a sidecar pod plans");
    let proxy = Target::Container("proxy".into());
    let w = |target: &Target, file: &str| {
        p.writes
            .iter()
            .find(|w| &w.target == target && w.file == file)
            .map(|w| (w.path().display().to_string(), w.text.clone()))
    };
    let (path, text) = w(&proxy, "memory.min").expect("the sidecar's memory.min");
    assert_eq!(
        path,
        format!(
            "/cg/kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab/{PROXY_ID}/memory.min"
        )
    );
    assert_eq!(text, (256 * MIB).to_string());
    assert_eq!(
        w(&proxy, "memory.high").expect("high").1,
        (512 * MIB * 80 / 100).to_string()
    );
    // The pod sum counts the sidecar: 50Mi + 20Mi + 256Mi.
    assert_eq!(
        w(&Target::Pod, "memory.min").expect("pod min").1,
        (326 * MIB).to_string()
    );
    // The plain init container gets nothing.
    assert!(
        !p.writes
            .iter()
            .any(|w| w.target.to_string().contains("init-schema")),
        "{:?}",
        p.writes
            .iter()
            .map(|w| w.target.to_string())
            .collect::<Vec<_>>()
    );
    // The bounds: the sidecar's own request and limit; the pod sum including it; a plain
    // init container is not a container of the annotation.
    type Forge = fn(&mut ResolvedQos);
    let cases: [(Forge, &str); 4] = [
        (
            |q| q.memory_qos.containers.get_mut("proxy").expect("proxy").min = 256 * MIB + 1,
            "memoryQOS.containers[\"proxy\"].memory.min = 268435457 is above the sidecar's memory request 268435456",
        ),
        (
            |q| {
                q.memory_qos
                    .containers
                    .get_mut("proxy")
                    .expect("proxy")
                    .high = MaxOr::Bytes(512 * MIB + 1)
            },
            "memoryQOS.containers[\"proxy\"].memory.high = 536870913 is above the sidecar's memory limit 536870912",
        ),
        (
            |q| q.memory_qos.pod.min = 326 * MIB + 1,
            "memoryQOS.pod.memory.min = 341835777 is above the pod's memory request 341835776",
        ),
        (
            |q| {
                let k = q.memory_qos.containers["redis"];
                q.memory_qos.containers.insert("init-schema".into(), k);
            },
            "memoryQOS.containers[\"init-schema\"]: the pod spec has no such container",
        ),
    ];
    for (forge, want) in cases {
        let mut q = q.clone();
        forge(&mut q);
        let err = plan(&q, &v, &layout, NodeCaps::default()).expect_err(want);
        assert!(err.reason.contains(want), "{}\n  want {want}", err.reason);
    }
}

/// The LS fixture with pod-level resources (`spec.resources`: 1Gi request, 2Gi limit, the
/// containers' own requests kept) and the annotation's pod section from the pod-level request,
/// with `memory.high` at 80% of the pod-level limit when `high` is set.
fn ls_pod_level(high: Option<i64>) -> (ResolvedQos, PodSpecView) {
    let mut pod: serde_json::Value = serde_json::from_str(LS).expect("fixture");
    pod["spec"]["resources"] =
        serde_json::json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}});
    let (mut q, v) = view(&pod.to_string());
    q.memory_qos.pod.min = 1024 * MIB;
    q.memory_qos.pod.low = 1024 * MIB;
    q.memory_qos.pod.high = high;
    (q, v)
}

#[test]
fn pod_level_resources_bound_the_pod_and_give_it_memory_high() {
    let layout = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let pod_text = |p: &Plan, file: &str| {
        p.writes
            .iter()
            .find(|w| w.target == Target::Pod && w.file == file)
            .map(|w| w.text.clone())
    };
    let high = 2048 * MIB * 80 / 100;
    let (q, v) = ls_pod_level(Some(high));
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("pod-level plans");
    assert_eq!(pod_text(&p, "memory.min"), Some((1024 * MIB).to_string()));
    assert_eq!(pod_text(&p, "memory.high"), Some(high.to_string()));
    // The containers keep their own numbers.
    assert!(p.writes.iter().any(|w| {
        w.target == Target::Container("redis".into())
            && w.file == "memory.min"
            && w.text == (50 * MIB).to_string()
    }));
    // Throttling off: the pod's memory.high is put back to max, so turning it off undoes it.
    let (q, v) = ls_pod_level(None);
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("pod-level plans");
    assert_eq!(pod_text(&p, "memory.high"), Some("max".into()));
    // Without pod-level resources, no pod memory.high is planned at all (bytes unchanged).
    let (q, v) = view(LS);
    let p = plan(&q, &v, &layout, NodeCaps::default()).expect("plans");
    assert_eq!(pod_text(&p, "memory.high"), None);

    type Forge = fn(&mut ResolvedQos);
    let cases: [(Forge, &str); 3] = [
        (
            |q| q.memory_qos.pod.min = 1024 * MIB + 1,
            "memoryQOS.pod.memory.min = 1073741825 is above the pod-level memory request (plus overhead) 1073741824",
        ),
        (
            |q| q.memory_qos.pod.high = Some(2048 * MIB + 1),
            "memoryQOS.pod.memory.high = 2147483649 is above the pod-level memory limit 2147483648",
        ),
        (
            |q| q.memory_qos.pod.high = Some(4096),
            "memoryQOS.pod.memory.high = 4096 is below its memory.min 1073741824",
        ),
    ];
    for (forge, want) in cases {
        let (mut q, v) = ls_pod_level(Some(high));
        forge(&mut q);
        let err = plan(&q, &v, &layout, NodeCaps::default()).expect_err(want);
        assert!(err.reason.contains(want), "{}\n  want {want}", err.reason);
    }
    // A pod memory.high on a pod without a pod-level limit is a forgery.
    let (mut q, v) = view(LS);
    q.memory_qos.pod.high = Some(64 * MIB);
    let err = plan(&q, &v, &layout, NodeCaps::default()).expect_err("no pod-level limit");
    assert!(
        err.reason.contains(
            "but the pod spec has no pod-level memory limit (spec.resources.limits.memory)"
        ),
        "{}",
        err.reason
    );
}

/// What the NRI plugin hands the runtime for a container is what the reconcile path writes
/// into it, and a pod the reconcile path refuses gets nothing.
#[test]
fn container_plan_is_the_containers_part_of_the_plan() {
    for (f, container) in [(LS, "redis"), (LS, "exporter"), (BE, "ffmpeg")] {
        let (q, v) = view(f);
        let layout = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let whole = plan(&q, &v, &layout, NodeCaps::default()).expect("plan");
        let target = Target::Container(container.into());
        let from_plan: Vec<(Knob, Value)> = whole
            .writes
            .iter()
            .filter(|w| w.target == target)
            .map(|w| (w.knob, w.value))
            .collect();
        let got = container_plan(&q, &v, container, NodeCaps::default()).expect("valid");
        assert!(!got.is_empty(), "{container}");
        assert_eq!(got, from_plan, "{container}");
    }
    let (q, v) = view(LS);
    assert_eq!(
        container_plan(&q, &v, "not-in-the-annotation", NodeCaps::default()),
        Ok(Vec::new())
    );
    let (mut q, v) = view(LS);
    q.memory_qos.containers.get_mut("redis").expect("redis").min = i64::MAX;
    let refused = container_plan(&q, &v, "redis", NodeCaps::default()).expect_err("forged");
    assert!(refused.reason.contains("memory.min"), "{refused}");
}
