//! The proactive reclaim loop on a tree laid out like mainline cgroup v2, the test playing the
//! kernel: it sets each container's `memory.pressure` total and `memory.current`, and after a
//! tick takes what the loop wrote into `memory.reclaim` (a regular file here) off
//! `memory.current`. The loop reclaims while the stall is low, stops at or above the target,
//! never passes the floor, and a forged floor or a node without the files posts the Event
//! instead. The last test runs the loop's thread over a pod cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_api::{
    DecisionSource, ProactiveReclaimFloor, ProactiveReclaimParams, ResolvedProactiveReclaim,
    ResolvedQos,
};
use koord_applier::node::proactive::cgroup::{Lack, Slices, node_support};
use koord_applier::node::proactive::metrics::{BackOff, ContainerRow};
use koord_applier::node::proactive::select::{REASON_REFUSED, REASON_UNSUPPORTED};
use koord_applier::node::proactive::{ProactiveLoop, ProactiveMetrics, Settings};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::event::EventKind;
use koord_translator::pod::spec_view::PodSpecView;

use crate::common::{Kernel, fixture, layout, make_pod_tree, with_runtime};

const MIB: u64 = 1 << 20;
const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const POD_DIR: &str = "kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
/// redis's `memory.min` in the fixture (50 MiB): its floor with floorPercent 0.
const REDIS_FLOOR: u64 = 52_428_800;

/// `ls-redis.json` with a proactive reclaim section: 6 s, 10 ms, 1% a step, the floors the
/// webhook writes (`memory.min`), `redis_floor` for redis.
fn pod(interval_seconds: i64, redis_floor: i64) -> Pod {
    let mut pod = with_runtime(fixture("ls-redis.json"), "containerd");
    let ann = pod.metadata.annotations.as_mut().expect("annotations");
    let key = koord_api::keys::ANNOTATION_RESOLVED_QOS;
    let mut q = ResolvedQos::from_annotation(&ann[key]).expect("annotation");
    q.proactive_reclaim = Some(ResolvedProactiveReclaim {
        enabled: true,
        params: ProactiveReclaimParams {
            interval_seconds,
            ..ProactiveReclaimParams::DEFAULT
        },
        source: DecisionSource::PodAnnotation,
        containers: [("redis", redis_floor), ("exporter", 20_971_520)]
            .into_iter()
            .map(|(n, b)| (n.to_owned(), ProactiveReclaimFloor { floor_bytes: b }))
            .collect(),
    });
    ann.insert(key.to_owned(), q.to_annotation());
    pod
}

fn view(pod: &Pod) -> PodSpecView {
    PodSpecView::from_pod(pod).expect("view")
}

/// The pod's tree on mainline cgroup v2 with `memory.reclaim` and PSI at `kubepods` and in
/// each container: (the tree, its layout, redis's directory).
fn tree(v: &PodSpecView) -> (tempfile::TempDir, Layout, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    for dir in make_pod_tree(&l, Kernel::MainlineV2, v) {
        let dir = tmp.path().join(dir);
        set_pressure(&dir, 0);
        std::fs::write(dir.join("memory.current"), format!("{}\n", 100 * MIB)).expect("seed");
        std::fs::write(dir.join("memory.reclaim"), "").expect("seed");
    }
    for f in ["memory.reclaim", "memory.pressure"] {
        std::fs::write(tmp.path().join("kubepods").join(f), "").expect("seed");
    }
    let redis = tmp.path().join(POD_DIR).join(REDIS);
    assert!(redis.is_dir(), "{}", redis.display());
    (tmp, l, redis)
}

fn set_pressure(dir: &Path, total_micros: u64) {
    std::fs::write(
        dir.join("memory.pressure"),
        format!(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={total_micros}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        ),
    )
    .expect("pressure");
}

fn current(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("memory.current"))
        .expect("current")
        .trim()
        .parse()
        .expect("bytes")
}

/// The kernel's part: what the loop asked `memory.reclaim` for (one write a reclaim here),
/// taken off `memory.current`; the file emptied for the next tick.
fn kernel_reclaims(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("memory.reclaim")).expect("reclaim");
    std::fs::write(dir.join("memory.reclaim"), "").expect("empty");
    let asked: u64 = text.trim().parse().ok()?;
    let now = current(dir);
    std::fs::write(dir.join("memory.current"), format!("{}\n", now - asked)).expect("current");
    Some(asked)
}

fn settings() -> Settings {
    Settings {
        enabled: true,
        write_budget: Duration::from_secs(1),
        // One write a reclaim: the fake memory.reclaim holds the whole ask.
        slices: Slices {
            slice: u64::MAX,
            gap: Duration::ZERO,
        },
        ..Settings::default()
    }
}

/// A container's series of the fixture's pod.
fn row(metrics: &ProactiveMetrics, container: &str) -> ContainerRow {
    metrics
        .containers_series
        .get("shop", "redis-0", container)
        .expect("the container's series")
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn reclaims_while_the_stall_is_low_backs_off_above_target_and_keeps_the_floor() {
    let p = pod(6, REDIS_FLOOR as i64);
    let v = view(&p);
    let (_tmp, l, redis) = tree(&v);
    std::fs::write(redis.join("memory.current"), format!("{}\n", 200 * MIB)).expect("seed");
    let registry = prometheus::Registry::new();
    let metrics = ProactiveMetrics::register(&registry).expect("metrics");
    let mut lp = ProactiveLoop::new(
        l.clone(),
        node_support(&l),
        settings(),
        Some(metrics.clone()),
    );
    assert!(lp.scan(std::slice::from_ref(&v), secs(0)).is_empty());
    assert_eq!(lp.len(), 2, "redis and exporter");

    // First tick: the totals only.
    assert_eq!(lp.tick(secs(0)).sampled, 2);
    assert_eq!(
        kernel_reclaims(&redis),
        None,
        "no reclaim on an unmeasured stall"
    );
    // Not due before its interval.
    assert_eq!(lp.tick(secs(3)).sampled, 0);

    // No stall: the first step is 1/32 of 1% of memory.current, doubled each interval; this
    // tree has no refault counts, so the stall alone grows it to the whole 1%, not past.
    let mut t = 0;
    let mut total = 0;
    let mut asked = Vec::new();
    for k in 0..7u32 {
        t += 6;
        let before = current(&redis);
        lp.tick(secs(t));
        let got = kernel_reclaims(&redis).expect("a step while the stall is low");
        let want = ((before / 100) << k.min(5)) >> 5;
        assert_eq!(got, want - want % 4096, "step {k}");
        asked.push(got);
    }
    assert_eq!(row(&metrics, "redis").bytes, asked.iter().sum::<u64>());
    let exporter = row(&metrics, "exporter").bytes;
    assert!(exporter > 0, "the exporter is looped too");
    assert_eq!(
        metrics.node_bytes.get(),
        asked.iter().sum::<u64>() + exporter
    );

    // 20 ms of stall an interval, twice the target: no reclaim, back-offs counted.
    for _ in 0..6 {
        t += 6;
        total += 20_000;
        set_pressure(&redis, total);
        lp.tick(secs(t));
        assert_eq!(kernel_reclaims(&redis), None, "no reclaim above the target");
    }
    let redis_row = row(&metrics, "redis");
    assert!(redis_row.backoffs(BackOff::Stall) >= 3, "{redis_row:?}");
    assert!((redis_row.stall.expect("stall") - 0.02).abs() < 1e-9);
    assert!((redis_row.target - 0.01).abs() < 1e-9);

    // The stall is low again: a probe within the longest back-off (8 intervals).
    let mut probed = false;
    for _ in 0..9 {
        t += 6;
        lp.tick(secs(t));
        if kernel_reclaims(&redis).is_some() {
            probed = true;
            break;
        }
    }
    assert!(probed, "probes again once the stall is low");

    // Just above the floor: asks never take it below, and stop at it.
    std::fs::write(
        redis.join("memory.current"),
        format!("{}\n", REDIS_FLOOR + 3 * MIB / 2),
    )
    .expect("seed");
    let mut last = None;
    for _ in 0..10 {
        t += 6;
        lp.tick(secs(t));
        last = kernel_reclaims(&redis);
        assert!(
            current(&redis) >= REDIS_FLOOR,
            "{} passed the floor",
            current(&redis)
        );
    }
    assert_eq!(last, None, "nothing asked at the floor");
    assert!(
        current(&redis) - REDIS_FLOOR < 4096,
        "reclaimed down to the floor's page"
    );

    // The pod goes: its containers leave the loop with their series.
    lp.scan(&[], secs(t));
    assert!(lp.is_empty());
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("text");
    assert!(!text.contains("pod=\"redis-0\""), "{text}");
}

#[test]
fn a_forged_floor_gets_an_event_and_no_reclaim() {
    let p = pod(6, 0);
    let v = view(&p);
    let (_tmp, l, redis) = tree(&v);
    let registry = prometheus::Registry::new();
    let metrics = ProactiveMetrics::register(&registry).expect("metrics");
    let mut lp = ProactiveLoop::new(
        l.clone(),
        node_support(&l),
        settings(),
        Some(metrics.clone()),
    );
    let events = lp.scan(std::slice::from_ref(&v), secs(0));
    assert_eq!(events.len(), 1);
    let ev = &events[0];
    assert_eq!((ev.kind, ev.reason), (EventKind::Warning, REASON_REFUSED));
    assert_eq!(
        ev.message,
        "koordinator.sh/resolved-qos proactiveReclaim refused, no reclaim: proactiveReclaim.containers[\"redis\"].floorBytes = 0 is below max(memory.min 52428800, floorPercent 0% of the container's memory request 52428800) = 52428800"
    );
    assert!(lp.is_empty(), "no container of the pod is looped");
    for n in 0..4 {
        lp.tick(secs(6 * n));
        assert_eq!(kernel_reclaims(&redis), None);
    }
    // Once per version of the pod.
    assert!(lp.scan(std::slice::from_ref(&v), secs(30)).is_empty());
    assert_eq!(
        metrics
            .refused
            .with_label_values(&["floor-below-spec"])
            .get(),
        1
    );
    // The webhook writes the right floor: the pod joins the loop.
    let fixed = view(&pod(6, REDIS_FLOOR as i64));
    assert!(lp.scan(std::slice::from_ref(&fixed), secs(36)).is_empty());
    assert_eq!(lp.len(), 2);
}

#[test]
fn a_node_without_the_files_says_what_it_lacks() {
    let v = view(&pod(6, REDIS_FLOOR as i64));
    let (tmp, l, _redis) = tree(&v);
    let check = |l: &Layout, lack: Lack, text: &str| {
        assert_eq!(node_support(l), Err(lack));
        let mut lp = ProactiveLoop::new(l.clone(), node_support(l), settings(), None);
        let events = lp.scan(std::slice::from_ref(&v), secs(0));
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].kind, events[0].reason),
            (EventKind::Normal, REASON_UNSUPPORTED)
        );
        assert_eq!(
            events[0].message,
            format!(
                "koordinator.sh/resolved-qos proactiveReclaim: unsupported on this node: {text}; no reclaim"
            )
        );
        assert!(lp.is_empty());
    };
    std::fs::remove_file(tmp.path().join("kubepods/memory.pressure")).expect("rm");
    check(
        &l,
        Lack::NoPsi,
        "memory.pressure (PSI: a kernel built with CONFIG_PSI, booted without psi=0)",
    );
    std::fs::remove_file(tmp.path().join("kubepods/memory.reclaim")).expect("rm");
    check(
        &l,
        Lack::NoMemoryReclaim,
        "memory.reclaim (cgroup v2 has it from Linux 5.19)",
    );
    let v1 = layout(tmp.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    check(
        &v1,
        Lack::CgroupV1,
        "memory.reclaim and memory.pressure (cgroup v1)",
    );
}

/// The thread over the watch's cache: a 1 s interval reclaims within a few seconds, and the
/// forged pod's Event reaches the sink.
#[test]
fn the_thread_reclaims_from_the_cache_and_posts_events() {
    use kube::runtime::{reflector, watcher};
    let good = pod(1, REDIS_FLOOR as i64);
    let (_tmp, l, redis) = tree(&view(&good));
    let mut forged = pod(1, 0);
    forged.metadata.name = Some("forged".into());
    forged.metadata.uid = Some("0000aaaa-0c1d-4e2f-8a9b-0123456789ab".into());
    let (store, mut writer) = reflector::store::<Pod>();
    writer.apply_watcher_event(&watcher::Event::InitApply(good));
    writer.apply_watcher_event(&watcher::Event::InitApply(forged));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let lp = ProactiveLoop::new(l.clone(), node_support(&l), settings(), None);
    std::thread::spawn(move || koord_applier::node::proactive::worker::run(lp, store, tx));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut asked = None;
    while asked.is_none() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        asked = kernel_reclaims(&redis);
    }
    assert_eq!(
        asked,
        Some(MIB / 32),
        "the first step, 1/32 of 1% of 100 MiB, from the thread"
    );
    let ev = rx.try_recv().expect("the forged pod's Event");
    let koord_applier::event_sink::SinkMsg::Event(ev) = ev else {
        panic!("an Event")
    };
    assert_eq!((ev.name.as_str(), ev.reason), ("forged", REASON_REFUSED));
}

/// The scan over the watch's cache: a pod whose resourceVersion has not moved is kept without
/// being looked at again; a new version is judged again (here: its floor forged, so it leaves
/// the loop with an Event); a deleted pod leaves.
#[test]
fn the_cache_scan_judges_a_pod_once_per_version() {
    use kube::runtime::{reflector, watcher};
    let mut good = pod(6, REDIS_FLOOR as i64);
    good.metadata.resource_version = Some("1".into());
    let (_tmp, l, _redis) = tree(&view(&good));
    let (store, mut writer) = reflector::store::<Pod>();
    writer.apply_watcher_event(&watcher::Event::InitApply(good.clone()));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let mut lp = ProactiveLoop::new(l.clone(), node_support(&l), settings(), None);
    assert!(lp.scan_store(&store, secs(0)).is_empty());
    assert_eq!(lp.len(), 2, "both containers looped");
    // The same version is not looked at again (a forged copy under the old version, which the
    // API server never serves, shows it: no verdict, no Event).
    let mut forged = pod(6, 0);
    forged.metadata.resource_version = Some("1".into());
    writer.apply_watcher_event(&watcher::Event::Apply(forged.clone()));
    assert!(lp.scan_store(&store, secs(5)).is_empty());
    assert_eq!(lp.len(), 2, "unchanged version: kept");
    forged.metadata.resource_version = Some("2".into());
    writer.apply_watcher_event(&watcher::Event::Apply(forged.clone()));
    let events = lp.scan_store(&store, secs(10));
    assert_eq!(events.len(), 1, "the new version is judged: {events:?}");
    assert_eq!(events[0].reason, REASON_REFUSED);
    assert!(lp.is_empty(), "the forged version leaves the loop");
    assert!(
        lp.scan_store(&store, secs(15)).is_empty(),
        "one Event per version"
    );
    writer.apply_watcher_event(&watcher::Event::Delete(forged));
    assert!(lp.scan_store(&store, secs(20)).is_empty());
    let mut back = good;
    back.metadata.resource_version = Some("3".into());
    writer.apply_watcher_event(&watcher::Event::Apply(back));
    assert!(lp.scan_store(&store, secs(25)).is_empty());
    assert_eq!(lp.len(), 2, "the good version joins again");
}
