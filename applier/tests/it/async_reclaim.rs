//! The async reclaim emulation on a tree laid out like mainline cgroup v2: the pod pass
//! registers each container whose `memory.wmark_ratio` the kernel lacks, the worker writes
//! `memory.reclaim` with the amount down to `wmark_low` (the watermarks from the limits the
//! container's files hold), the Event names the knob emulated, and a forgotten pod is no
//! longer touched. The effect on a real kernel is in the cgroup v2 node suite.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;

use common::{Kernel, fixture, layout, make_pod_tree, with_runtime};
use koord_applier::apply::Applier;
use koord_applier::cgroup::{CgroupDriver, CgroupVersion};
use koord_applier::events::applied_message;
use koord_applier::pod_spec_view::PodSpecView;
use koord_applier::reclaim::{AsyncReclaim, Settings};

const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const MIB: u64 = 1 << 20;

fn settings() -> Settings {
    Settings {
        enabled: true,
        be_first: true,
        interval: Duration::from_millis(20),
        cpu_percent: 100,
        proc_root: "/proc".into(),
    }
}

/// What the worker last wrote into `memory.reclaim` (a regular file here), emptied after.
fn take_request(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    std::fs::write(path, "").ok()?;
    text.trim().parse().ok()
}

fn wait_for_request(path: &Path, within: Duration) -> Option<u64> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(v) = take_request(path) {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_container_above_wmark_high_is_reclaimed_to_wmark_low_until_its_pod_goes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let v =
        PodSpecView::from_pod(&with_runtime(fixture("ls-redis.json"), "containerd")).expect("view");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    std::fs::write(tmp.path().join("kubepods/memory.reclaim"), "").expect("seed");
    let redis = tmp
        .path()
        .join("kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab")
        .join(REDIS);
    assert!(redis.is_dir(), "{}", redis.display());
    // 81 MiB used, above wmark_high of the 80 MiB memory.high the pass writes.
    std::fs::write(redis.join("memory.current"), format!("{}\n", 81 * MIB)).expect("seed");
    std::fs::write(redis.join("memory.reclaim"), "").expect("seed");

    let reclaim = AsyncReclaim::detect(&l, settings(), None).expect("memory.reclaim is there");
    reclaim.start().expect("worker");
    let applier = Applier::new(l, false, None).with_async_reclaim(Some(reclaim.clone()));
    let r = applier.apply(&v);
    let knobs = vec![
        "memory.wmark_ratio",
        "memory.wmark_scale_factor",
        "memory.wmark_min_adj",
    ];
    assert_eq!(
        r.emulated,
        [
            ("exporter".to_owned(), knobs.clone()),
            ("redis".to_owned(), knobs)
        ]
        .into(),
        "{r:#?}"
    );
    let msg = applied_message(&r);
    assert!(
        msg.contains("unsupported on this node: memory.priority memory.use_priority_oom;"),
        "{msg}"
    );
    assert!(
        msg.contains("emulated on this node with memory.reclaim: memory.wmark_ratio memory.wmark_scale_factor memory.wmark_min_adj for exporter redis"),
        "{msg}"
    );
    assert_eq!(reclaim.len(), 2);

    // wmark_high = 20480 pages x 95% = 19456 pages; wmark_low = 19456 - 20480 x 20/10000
    // (40 pages) = 19416 pages: the worker asks for 81 MiB - 19416 pages.
    let want = 81 * MIB - 19_416 * 4096;
    assert_eq!(
        wait_for_request(&redis.join("memory.reclaim"), Duration::from_secs(5)),
        Some(want)
    );
    // Below wmark_high, one tick ahead included: nothing asked.
    std::fs::write(redis.join("memory.current"), format!("{}\n", 70 * MIB)).expect("usage");
    std::thread::sleep(Duration::from_millis(100));
    let _ = take_request(&redis.join("memory.reclaim"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        take_request(&redis.join("memory.reclaim")),
        None,
        "below wmark_high"
    );

    // The pod goes: nothing more is asked, however high it reads.
    applier.forget(&v.uid);
    assert!(reclaim.is_empty());
    std::thread::sleep(Duration::from_millis(100));
    let _ = take_request(&redis.join("memory.reclaim"));
    std::fs::write(redis.join("memory.current"), format!("{}\n", 90 * MIB)).expect("usage");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        take_request(&redis.join("memory.reclaim")),
        None,
        "a forgotten pod"
    );
}

#[test]
fn off_or_without_memory_reclaim_the_knob_stays_unsupported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let v =
        PodSpecView::from_pod(&with_runtime(fixture("ls-redis.json"), "containerd")).expect("view");
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    // A kernel before 5.19: no memory.reclaim.
    assert!(AsyncReclaim::detect(&l, settings(), None).is_none());
    std::fs::write(tmp.path().join("kubepods/memory.reclaim"), "").expect("seed");
    // Turned off.
    let off = Settings {
        enabled: false,
        be_first: false,
        ..settings()
    };
    assert!(AsyncReclaim::detect(&l, off, None).is_none());
    let r = Applier::new(l, false, None).apply(&v);
    assert!(r.emulated.is_empty());
    assert!(
        applied_message(&r).contains("memory.wmark_ratio"),
        "named unsupported: {}",
        applied_message(&r)
    );
}

/// The cgroup v2 node's guest (1.5 GiB, `vm.min_free_kbytes` 65536): watermarks min 16,384,
/// low 20,480, high 24,576 pages, with `free` pages free.
fn zoneinfo(dir: &Path, free: u64) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(
        dir.join("zoneinfo"),
        format!(
            "Node 0, zone   Normal\n  pages free     {free}\n        min      16384\n        low      20480\n        high     24576\n"
        ),
    )
    .expect("zoneinfo");
    dir.to_path_buf()
}

/// A BE pod whose annotation has `memory.wmark_min_adj` 50 (the reference's BE default).
fn be_pod() -> PodSpecView {
    let mut pod = with_runtime(fixture("be-transcode.json"), "containerd");
    let ann = pod.metadata.annotations.as_mut().expect("annotations");
    let q = ann["koordinator.sh/resolved-qos"]
        .replace("\"enabled\":false", "\"enabled\":true")
        .replace("\"wmarkMinAdj\":0", "\"wmarkMinAdj\":50")
        .replace("\"memory.wmark_min_adj\":0", "\"memory.wmark_min_adj\":50");
    ann.insert("koordinator.sh/resolved-qos".into(), q);
    PodSpecView::from_pod(&pod).expect("view")
}

#[test]
fn under_node_pressure_the_be_containers_are_reclaimed_first_the_largest_first() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let (ls, be) = (
        PodSpecView::from_pod(&with_runtime(fixture("ls-redis.json"), "containerd")).expect("view"),
        be_pod(),
    );
    make_pod_tree(&l, Kernel::MainlineV2, &ls);
    make_pod_tree(&l, Kernel::MainlineV2, &be);
    std::fs::write(tmp.path().join("kubepods/memory.reclaim"), "").expect("seed");
    let be_dir = tmp
        .path()
        .join("kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed");
    let ffmpeg = be_dir.join("1111111111111111111111111111111111111111111111111111111111111111");
    let uploader = be_dir.join("2222222222222222222222222222222222222222222222222222222222222222");
    let redis = tmp
        .path()
        .join("kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab")
        .join(REDIS);
    for (dir, usage) in [
        (&ffmpeg, 400 * MIB),
        (&uploader, 10 * MIB),
        (&redis, 60 * MIB),
    ] {
        std::fs::write(dir.join("memory.current"), format!("{usage}\n")).expect("usage");
        std::fs::write(dir.join("memory.reclaim"), "").expect("seed");
    }
    // Plenty free: nothing asked of anyone.
    let proc = zoneinfo(&tmp.path().join("proc"), 100_000);
    let settings = Settings {
        enabled: false,
        proc_root: proc.clone(),
        ..settings()
    };
    let reclaim = AsyncReclaim::detect(&l, settings, None).expect("memory.reclaim is there");
    reclaim.start().expect("worker");
    let applier = Applier::new(l, false, None).with_async_reclaim(Some(reclaim.clone()));
    for v in [&ls, &be] {
        let r = applier.apply(v);
        assert!(r.reason.is_none(), "{r:#?}");
    }
    assert_eq!(applier.apply(&be).emulated.len(), 2, "both BE containers");
    std::thread::sleep(Duration::from_millis(200));
    for dir in [&ffmpeg, &uploader, &redis] {
        assert_eq!(
            take_request(&dir.join("memory.reclaim")),
            None,
            "{}",
            dir.display()
        );
    }
    // 20,000 pages free, under the floor (high + half the high-min band = 28,672): the
    // deficit to one band above it, plus the tick's fall (80,000 pages), from the BE
    // containers, the largest first, each at most half its usage and 64 MiB (both bounds are
    // met here); never the LS container.
    zoneinfo(&proc, 20_000);
    assert_eq!(
        wait_for_request(&ffmpeg.join("memory.reclaim"), Duration::from_secs(5)),
        Some(64 * MIB)
    );
    assert_eq!(
        wait_for_request(&uploader.join("memory.reclaim"), Duration::from_secs(5)),
        Some(5 * MIB)
    );
    assert_eq!(
        take_request(&redis.join("memory.reclaim")),
        None,
        "LS is not chosen"
    );
}
