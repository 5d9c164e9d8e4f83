//! The async reclaim emulation on a tree laid out like mainline cgroup v2: the pod pass
//! registers each container whose `memory.wmark_ratio` the kernel lacks, the worker writes
//! `memory.reclaim` with the amount down to `wmark_low` (the watermarks from the limits the
//! container's files hold), the Event names the knob emulated, and a forgotten pod is no
//! longer touched. The effect on a real kernel is in the cgroup v2 node suite.

use std::path::Path;
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
        interval: Duration::from_millis(20),
        cpu_percent: 100,
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
    assert_eq!(r.emulated, ["exporter", "redis"], "{r:#?}");
    let msg = applied_message(&r);
    assert!(
        msg.contains("emulated on this node with memory.reclaim: memory.wmark_ratio memory.wmark_scale_factor for exporter redis"),
        "{msg}"
    );
    assert!(!msg.contains("unsupported on this node: memory.priority memory.use_priority_oom memory.wmark_min_adj memory.wmark_ratio"), "{msg}");
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
