//! The async reclaim worker's cost when it has nothing to reclaim: one tick over 110 containers
//! (the kubelet's max-pods default, one container each) on a temporary cgroup v2 tree, each
//! below its wmark_high: one `pread` of `memory.current` per container and the decision. At the
//! default interval (100 ms) the worker makes 10 ticks a second, so a tick of T µs costs
//! T x 10 / 10,000 percent of one core. Once a second a tick also re-reads the limits
//! (`memory.max`, `memory.high`): measured apart.
//! The tree is on tmpfs (/dev/shm) when there is one, like cgroupfs in memory.
//! Run: cargo bench -p koord-applier --bench reclaim

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use koord_applier::node::reclaim::{AsyncReclaim, Registration, Settings, Worker};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

const CONTAINERS: usize = 110;

fn tree(root: &Path) -> Arc<AsyncReclaim> {
    let layout = Layout::new(
        root.to_path_buf(),
        CgroupVersion::V2,
        CgroupDriver::Cgroupfs,
    );
    let kubepods = root.join("kubepods");
    std::fs::create_dir_all(&kubepods).expect("mkdir");
    std::fs::write(kubepods.join("memory.reclaim"), "").expect("seed");
    let settings = Settings {
        enabled: true,
        be_first: false,
        throttle: false,
        interval: Duration::from_millis(100),
        cpu_percent: 5,
        proc_root: "/proc".into(),
        write_slice: koord_applier::node::shared::reclaim_slice::WRITE_SLICE,
    };
    let reclaim =
        AsyncReclaim::detect(&layout, settings, Default::default(), None).expect("memory.reclaim");
    for i in 0..CONTAINERS {
        let dir = kubepods.join(format!("burstable/pod{i:04}/c{i:04}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        // 64 MiB used of a 256 MiB limit: below wmark_high, nothing to reclaim.
        for (f, v) in [
            ("memory.current", "67108864"),
            ("memory.max", "268435456"),
            ("memory.high", "max"),
            ("memory.reclaim", ""),
        ] {
            std::fs::write(dir.join(f), v).expect("seed");
        }
        reclaim.set(
            &format!("uid-{i}"),
            "c",
            Registration {
                namespace: "bench".into(),
                pod: format!("pod-{i}"),
                dir: dir.into(),
                ratio: 95,
                scale_factor: 20,
                min_adj: 0,
            },
        );
    }
    reclaim
}

fn bench(c: &mut Criterion) {
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("tmp");
    let reclaim = tree(base.path());
    let mut g = c.benchmark_group("reclaim");
    // The limits are re-read at the first tick and then once a second: a fresh worker per
    // iteration measures a tick with them, a warmed one without.
    g.bench_function("tick_110_containers_idle", |b| {
        let mut w = Worker::new(&reclaim);
        assert_eq!(w.tick(), CONTAINERS);
        b.iter(|| w.tick());
    });
    g.bench_function("tick_110_containers_idle_with_limits", |b| {
        b.iter(|| Worker::new(&reclaim).tick());
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
