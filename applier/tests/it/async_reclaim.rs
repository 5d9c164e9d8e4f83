//! The async reclaim emulation on a tree laid out like mainline cgroup v2: the pod pass
//! registers each container whose `memory.wmark_ratio` the kernel lacks, the worker writes
//! `memory.reclaim` with the amount down to `wmark_low` (the watermarks from the limits the
//! container's files hold), the Event names the knob emulated, and a forgotten pod is no
//! longer touched. The effect on a real kernel is in the cgroup v2 node suite.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;

use common::{Kernel, fixture, layout, make_pod_tree, with_runtime};
use koord_applier::node::reclaim::{AsyncReclaim, Settings};
use koord_applier::node::writer::{NodeWriter, record};
use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::events::applied_message;
use koord_translator::pod::plan::Target;
use koord_translator::pod::report::PodReport;
use koord_translator::pod::spec_view::PodSpecView;

const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const MIB: u64 = 1 << 20;

fn settings() -> Settings {
    Settings {
        enabled: true,
        be_first: true,
        throttle: true,
        interval: Duration::from_millis(20),
        cpu_percent: 100,
        proc_root: "/proc".into(),
        // One write a reclaim: the fake memory.reclaim (a regular file) holds the amount asked.
        write_slice: u64::MAX,
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

/// The LS Redis pod's tree on mainline cgroup v2 (cgroupfs), `memory.reclaim` at the root:
/// (the tree's directory, its layout, the pod, the redis container's directory).
fn redis_tree() -> (tempfile::TempDir, Layout, PodSpecView, PathBuf) {
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
    (tmp, l, v, redis)
}

/// Slices (1 MiB here): the worker asks for 3 MiB in three writes. The fake file keeps only the
/// last write (1 MiB), the metric counts whole reclaims (3 MiB each).
#[test]
fn a_reclaim_is_written_in_slices() {
    let (_tmp, l, v, redis) = redis_tree();
    // wmark_low 19416 pages (see the test below) + 3 MiB: above wmark_high (19456 pages).
    std::fs::write(
        redis.join("memory.current"),
        format!("{}\n", 19_416 * 4096 + 3 * MIB),
    )
    .expect("seed");
    std::fs::write(redis.join("memory.reclaim"), "").expect("seed");
    let registry = prometheus::Registry::new();
    let metrics = koord_applier::node::reclaim::metrics::ReclaimMetrics::register(&registry)
        .expect("metrics");
    let sliced = Settings {
        write_slice: MIB,
        ..settings()
    };
    let reclaim = AsyncReclaim::detect(&l, sliced, Arc::default(), Some(metrics.clone()))
        .expect("memory.reclaim is there");
    reclaim.start().expect("worker");
    let applier = Applier::new(l, false, None).with_hooks(Some(reclaim.clone()));
    applier.apply(&v);
    assert_eq!(
        wait_for_request(&redis.join("memory.reclaim"), Duration::from_secs(5)),
        Some(MIB),
        "the last write is one slice"
    );
    // The fake usage does not fall: every tick asks the same 3 MiB until it is lowered.
    std::fs::write(redis.join("memory.current"), format!("{}\n", 70 * MIB)).expect("usage");
    std::thread::sleep(Duration::from_millis(100));
    let asked = metrics
        .bytes
        .with_label_values(&["shop", "redis-0", "wmark"])
        .get();
    assert!(
        asked >= 3 * MIB && asked.is_multiple_of(3 * MIB),
        "each reclaim asks 3 MiB in all: {asked} bytes"
    );
    applier.forget(&v.uid);
}

#[test]
fn a_container_above_wmark_high_is_reclaimed_to_wmark_low_until_its_pod_goes() {
    let (_tmp, l, v, redis) = redis_tree();
    assert!(redis.is_dir(), "{}", redis.display());
    // 81 MiB used, above wmark_high of the 80 MiB memory.high the pass writes.
    std::fs::write(redis.join("memory.current"), format!("{}\n", 81 * MIB)).expect("seed");
    std::fs::write(redis.join("memory.reclaim"), "").expect("seed");

    let reclaim = AsyncReclaim::detect(&l, settings(), Arc::default(), None)
        .expect("memory.reclaim is there");
    reclaim.start().expect("worker");
    let applier = Applier::new(l, false, None).with_hooks(Some(reclaim.clone()));
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
    assert!(AsyncReclaim::detect(&l, settings(), Arc::default(), None).is_none());
    std::fs::write(tmp.path().join("kubepods/memory.reclaim"), "").expect("seed");
    // Turned off.
    let off = Settings {
        enabled: false,
        be_first: false,
        ..settings()
    };
    assert!(AsyncReclaim::detect(&l, off, Arc::default(), None).is_none());
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

/// An LS pod (redis) and a BE pod (ffmpeg 400 MiB, uploader 10 MiB) on a mainline cgroup v2
/// tree with `memory.reclaim`, and where the BE-first tests keep their `zoneinfo`.
struct Node {
    tmp: tempfile::TempDir,
    ls: PodSpecView,
    be: PodSpecView,
    ffmpeg: PathBuf,
    uploader: PathBuf,
    redis: PathBuf,
    proc: PathBuf,
}

impl Node {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let ls = PodSpecView::from_pod(&with_runtime(fixture("ls-redis.json"), "containerd"))
            .expect("view");
        let be = be_pod();
        make_pod_tree(&l, Kernel::MainlineV2, &ls);
        make_pod_tree(&l, Kernel::MainlineV2, &be);
        std::fs::write(tmp.path().join("kubepods/memory.reclaim"), "").expect("seed");
        let be_dir = tmp
            .path()
            .join("kubepods/besteffort/pod9c8b7a65-4321-4fed-cba9-876543210fed");
        let redis = tmp
            .path()
            .join("kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab")
            .join(REDIS);
        let node = Self {
            ffmpeg: be_dir.join("1111111111111111111111111111111111111111111111111111111111111111"),
            uploader: be_dir
                .join("2222222222222222222222222222222222222222222222222222222222222222"),
            redis,
            // Plenty free: nothing asked of anyone.
            proc: zoneinfo(&tmp.path().join("proc"), 100_000),
            tmp,
            ls,
            be,
        };
        for (dir, usage) in [
            (&node.ffmpeg, 400 * MIB),
            (&node.uploader, 10 * MIB),
            (&node.redis, 60 * MIB),
        ] {
            node.usage(dir, usage);
            std::fs::write(dir.join("memory.reclaim"), "").expect("seed");
        }
        node
    }

    fn usage(&self, dir: &Path, bytes: u64) {
        std::fs::write(dir.join("memory.current"), format!("{bytes}\n")).expect("usage");
    }

    fn free(&self, pages: u64) {
        zoneinfo(&self.proc, pages);
    }

    /// A registry and worker with BE-first on (async reclaim off), and an applier that has
    /// applied both pods.
    fn start(&self, throttle: bool) -> (Arc<AsyncReclaim>, Applier, PodReport) {
        let settings = Settings {
            enabled: false,
            throttle,
            proc_root: self.proc.clone(),
            ..settings()
        };
        let l = layout(self.tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
        // As `run` starts: the values a crashed applier left go back first.
        let writer = Arc::new(NodeWriter::new(false, true));
        let root = l
            .dir(&l.kubepods_dir(), Controller::Memory)
            .expect("kubepods");
        writer.put_back_left(&root);
        let reclaim =
            AsyncReclaim::detect(&l, settings, writer, None).expect("memory.reclaim is there");
        reclaim.start().expect("worker");
        let applier = Applier::new(l, false, None).with_hooks(Some(reclaim.clone()));
        let r = applier.apply(&self.ls);
        assert!(r.reason.is_none(), "{r:#?}");
        let r = applier.apply(&self.be);
        assert!(r.reason.is_none(), "{r:#?}");
        (reclaim, applier, r)
    }
}

#[test]
fn under_node_pressure_the_be_containers_are_reclaimed_first_the_largest_first() {
    let node = Node::new();
    let (ffmpeg, uploader, redis) = (&node.ffmpeg, &node.uploader, &node.redis);
    let (_reclaim, applier, _) = node.start(false);
    assert_eq!(
        applier.apply(&node.be).emulated.len(),
        2,
        "both BE containers"
    );
    std::thread::sleep(Duration::from_millis(200));
    for dir in [ffmpeg, uploader, redis] {
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
    node.free(20_000);
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

fn high(dir: &Path) -> String {
    common::read(&dir.join("memory.high"))
}

fn wait_for_high(dir: &Path, want: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if high(dir) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "{}: memory.high {} after 5 s, not {want}",
        dir.display(),
        high(dir)
    );
}

/// The worker writes the value before back, then drops its record (a crash between the two
/// leaves a record of a value already back, never a held value without its record): the record
/// goes a moment after the file reads the value.
fn wait_unrecorded(dir: &Path) {
    let until = Instant::now() + Duration::from_secs(5);
    while record::kept(dir, "memory.high").is_some() {
        assert!(
            Instant::now() < until,
            "{}: still recorded after 5 s: {:?}",
            dir.display(),
            record::kept(dir, "memory.high")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `user.` xattr on the temp dir's filesystem (the record the throttle needs); without one
/// the test fails naming why, it never passes unrun.
fn needs_user_xattrs(dir: &Path) {
    if let Err(e) = record::keep(dir, "memory.high", "max") {
        panic!("cannot run: no user xattrs on {}: {e}", dir.display());
    }
    record::forget(dir, "memory.high").expect("the probe record dropped");
}

#[test]
fn under_node_pressure_be_growth_is_held_at_its_usage_and_released_after() {
    let node = Node::new();
    needs_user_xattrs(node.tmp.path());
    let (ffmpeg, uploader, redis) = (&node.ffmpeg, &node.uploader, &node.redis);
    // Under the BE-first floor but above the Alibaba throttle point (min + half the min-low
    // band = 18,432 pages) from the first look: reclaimed, not throttled.
    node.free(20_000);
    let (reclaim, applier, _) = node.start(true);
    assert_eq!(
        wait_for_request(&ffmpeg.join("memory.reclaim"), Duration::from_secs(5)),
        Some(64 * MIB)
    );
    for dir in [ffmpeg, uploader] {
        assert_eq!(high(dir), "max", "not throttled");
        assert_eq!(record::kept(dir, "memory.high"), None);
    }
    let redis_high = high(redis);

    // Under the throttle point: each BE container held at its usage (the small one at 32 MiB),
    // the value before recorded on its cgroup; the LS container untouched.
    node.free(15_000);
    wait_for_high(ffmpeg, &(400 * MIB).to_string());
    wait_for_high(uploader, &(32 * MIB).to_string());
    assert_eq!(record::kept(ffmpeg, "memory.high").as_deref(), Some("max"));
    assert!(reclaim.holds_high(&node.be.uid, "ffmpeg"));
    assert_eq!(high(redis), redis_high, "LS is not throttled");
    assert!(!reclaim.holds_high(&node.ls.uid, "redis"));

    // The pod pass leaves the held file alone (its annotation says max).
    let r = applier.apply(&node.be);
    let knob = r
        .knobs
        .iter()
        .find(|k| k.target == Target::Container("ffmpeg".into()) && k.file == "memory.high")
        .unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(knob.outcome, Outcome::Held, "{knob:#?}");
    assert_eq!(high(ffmpeg), (400 * MIB).to_string());

    // Reclaimed while the pressure lasts: the throttle follows usage down.
    node.usage(ffmpeg, 300 * MIB);
    wait_for_high(ffmpeg, &(300 * MIB).to_string());

    // Between the throttle point and the zones' high watermark: held.
    node.free(20_000);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(high(ffmpeg), (300 * MIB).to_string());
    // Free memory back at high: the values before, the records gone.
    node.free(100_000);
    for dir in [ffmpeg, uploader] {
        wait_for_high(dir, "max");
        wait_unrecorded(dir);
    }
    assert!(!reclaim.holds_high(&node.be.uid, "ffmpeg"));

    // On exit every throttle is released and none is set again.
    node.free(15_000);
    wait_for_high(ffmpeg, &(300 * MIB).to_string());
    reclaim.release_all();
    assert_eq!(high(ffmpeg), "max");
    assert_eq!(record::kept(ffmpeg, "memory.high"), None);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(high(ffmpeg), "max", "nothing set after release_all");
}

#[test]
fn a_throttle_left_by_a_crash_is_released_by_the_next_applier() {
    let node = Node::new();
    needs_user_xattrs(node.tmp.path());
    // An applier killed mid-throttle: the file holds the throttle, the cgroup the value before
    // (200 MiB here, not the annotation's max, to tell the two apart).
    record::keep(&node.ffmpeg, "memory.high", "209715200").expect("record");
    std::fs::write(node.ffmpeg.join("memory.high"), (100 * MIB).to_string()).expect("throttle");
    let (reclaim, _applier, r) = node.start(true);
    // The start sweep put the value before back, then the first pass read and compared it as
    // usual: the annotation's max is written over the value before, not over the throttle.
    let knob = r
        .knobs
        .iter()
        .find(|k| k.target == Target::Container("ffmpeg".into()) && k.file == "memory.high")
        .unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(knob.old.as_deref(), Some("209715200"), "{knob:#?}");
    assert_eq!(high(&node.ffmpeg), "max");
    assert_eq!(record::kept(&node.ffmpeg, "memory.high"), None);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        high(&node.ffmpeg),
        "max",
        "the worker finds nothing left to restore"
    );
    assert!(!reclaim.holds_high(&node.be.uid, "ffmpeg"));
}

#[test]
fn without_the_throttle_be_first_only_reclaims() {
    let node = Node::new();
    let (reclaim, _applier, _) = node.start(false);
    node.free(15_000);
    assert_eq!(
        wait_for_request(&node.ffmpeg.join("memory.reclaim"), Duration::from_secs(5)),
        Some(64 * MIB)
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(high(&node.ffmpeg), "max");
    assert!(!reclaim.holds_high(&node.be.uid, "ffmpeg"));
}

#[test]
fn a_restarted_container_leaves_its_old_throttle_behind_and_gets_its_own() {
    let node = Node::new();
    needs_user_xattrs(node.tmp.path());
    node.free(20_000);
    let (reclaim, applier, _) = node.start(true);
    node.free(15_000);
    wait_for_high(&node.ffmpeg, &(400 * MIB).to_string());
    // The container restarts: a new ID, a new cgroup (the old one still there, as the runtime
    // may leave it for a moment).
    let mut be = node.be.clone();
    let c = be
        .containers
        .iter_mut()
        .find(|c| c.name == "ffmpeg")
        .expect("ffmpeg");
    let new_id = "3".repeat(64);
    c.container_id = Some(format!("containerd://{new_id}"));
    let l = layout(node.tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    make_pod_tree(&l, Kernel::MainlineV2, &be);
    let restarted = node.ffmpeg.with_file_name(&new_id);
    node.usage(&restarted, 50 * MIB);
    std::fs::write(restarted.join("memory.reclaim"), "").expect("seed");
    applier.apply(&be);
    // The old cgroup's value comes back; the new one is throttled in its own right, with its
    // own record.
    wait_for_high(&node.ffmpeg, "max");
    wait_unrecorded(&node.ffmpeg);
    wait_for_high(&restarted, &(50 * MIB).to_string());
    assert_eq!(
        record::kept(&restarted, "memory.high").as_deref(),
        Some("max")
    );
    assert!(reclaim.holds_high(&be.uid, "ffmpeg"));
}
