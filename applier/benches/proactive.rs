//! The proactive reclaim loop's cost per tick: 110 opted-in containers (the kubelet's max-pods
//! default, one container each) on a temporary cgroup v2 tree, every one due. Per container
//! one `pread` of `memory.pressure` and of `memory.current` and the controller's decision.
//! `idle`: each container is at its floor, so nothing is written: the loop's own cost. `reclaiming`: each asks 1% of 64 MiB, one 655360-byte write into a
//! regular file (the kernel's reclaim itself is not measured here).
//! The tree is on tmpfs (/dev/shm) when there is one, like cgroupfs in memory.
//! Run: cargo bench -p koord-applier --bench proactive

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::proactive::cgroup::Slices;
use koord_applier::node::proactive::{ProactiveLoop, Settings};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

const CONTAINERS: usize = 110;

/// The annotation of every pod: proactive reclaim on (6 s, 10 ms, 1%), floor 0.
const RESOLVED: &str = r#"{"version":1,"qosClass":"LS","qosClassSource":"label","memoryQOS":{"enabled":true,"policy":"auto","source":"pod-annotation","params":{"minLimitPercent":0,"lowLimitPercent":0,"throttlingPercent":0,"wmarkRatio":0,"wmarkMinAdj":0,"wmarkScalePermill":50,"priority":0,"priorityEnable":0,"oomKillGroup":0},"pod":{"memory.min":0,"memory.low":0},"containers":{"c":{"memory.min":0,"memory.low":0,"memory.high":"max","memory.wmark_ratio":0,"memory.wmark_high":"max","memory.wmark_scale_factor":50,"memory.wmark_min_adj":0,"memory.priority":0,"memory.use_priority_oom":0,"memory.oom.group":0}}},"proactiveReclaim":{"enabled":true,"params":{"intervalSeconds":6,"stallTargetMicros":10000,"stepPermill":10,"floorPercent":0},"source":"pod-annotation","containers":{"c":{"floorBytes":0}}}}"#;

/// One LS pod, one container with a 256 MiB request, proactive reclaim on (6 s, 10 ms, 1%).
fn pod(i: usize) -> PodSpecView {
    let id = format!("{i:064x}");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": "bench",
                     "uid": format!("00000000-0000-4000-8000-{i:012}"),
                     "annotations": {"koordinator.sh/resolved-qos": RESOLVED}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "256Mi"}}}]},
        "status": {"qosClass": "Burstable", "phase": "Running",
                   "containerStatuses": [{"name": "c", "containerID": format!("containerd://{id}"),
                     "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
    }))
    .expect("pod");
    PodSpecView::from_pod(&pod).expect("view")
}

fn tree(root: &Path, layout: &Layout, pods: &[PodSpecView]) -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    let kubepods = root.join("kubepods");
    std::fs::create_dir_all(&kubepods).expect("mkdir");
    for f in ["memory.reclaim", "memory.pressure"] {
        std::fs::write(kubepods.join(f), "").expect("seed");
    }
    for p in pods {
        let c = &p.containers[0];
        let id = koord_translator::cgroup::layout::ContainerId::parse(
            c.container_id.as_deref().expect("id"),
        )
        .expect("id");
        let rel = layout
            .pod_dir(&p.uid, p.kube_qos)
            .expect("pod dir")
            .join(layout.container_leaf(&id));
        let dir = root.join(rel);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (f, v) in [
            ("memory.current", "67108864\n"),
            ("memory.reclaim", ""),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
        ] {
            std::fs::write(dir.join(f), v).expect("seed");
        }
        dirs.push(dir);
    }
    dirs
}

fn settings() -> Settings {
    Settings {
        enabled: true,
        write_budget: Duration::from_secs(1),
        slices: Slices::default(),
        ..Settings::default()
    }
}

fn bench(c: &mut Criterion) {
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("tmp");
    let layout = Layout::new(base.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let pods: Vec<PodSpecView> = (0..CONTAINERS).map(pod).collect();
    let dirs = tree(base.path(), &layout, &pods);
    let support = koord_applier::node::proactive::cgroup::node_support(&layout);
    let mut g = c.benchmark_group("proactive");
    // Every tick 6 s after the last on the loop's clock: every container is due each time.
    // The pressure totals never move, so after the first tick each container reclaims.
    g.bench_function("tick_110_containers_reclaiming", |b| {
        let mut lp = ProactiveLoop::new(layout.clone(), support, settings(), None);
        assert!(lp.scan(&pods, Duration::ZERO).is_empty());
        assert_eq!(lp.len(), CONTAINERS);
        let mut t = 0;
        lp.tick(Duration::ZERO);
        b.iter(|| {
            t += 6;
            let r = lp.tick(Duration::from_secs(t));
            assert_eq!(r.sampled, CONTAINERS);
            r
        });
    });
    // memory.current 0, at the floor (0): every container is read and decided, none written.
    for d in &dirs {
        std::fs::write(d.join("memory.current"), "0\n").expect("seed");
    }
    g.bench_function("tick_110_containers_idle", |b| {
        let mut lp = ProactiveLoop::new(layout.clone(), support, settings(), None);
        lp.scan(&pods, Duration::ZERO);
        lp.tick(Duration::ZERO);
        let mut t = 0;
        b.iter(|| {
            t += 6;
            let r = lp.tick(Duration::from_secs(t));
            assert_eq!((r.sampled, r.reclaimed), (CONTAINERS, 0));
            r
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
