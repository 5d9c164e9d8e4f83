//! 1,000 pods x 2 containers on a temporary cgroup v2 tree (mainline files): a first apply that
//! writes every differing knob, and a resync pass with nothing to change; and the ancestors'
//! memory protection over the same tree (what `run` adds after each resync).
//! The tree is on tmpfs (/dev/shm) when there is one, like cgroupfs in memory.
//! Run: cargo bench -p koord-applier --bench apply

use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::ancestors::{KubeletMemoryQos, MemoryAncestors};
use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::layout::{ContainerId, KubeQos, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::spec_view::PodSpecView;

const PODS: usize = 1000;
const DEFAULTS: [(&str, &str); 7] = [
    ("memory.min", "0"),
    ("memory.low", "0"),
    ("memory.high", "max"),
    ("memory.max", "max"),
    ("memory.oom.group", "0"),
    ("cpu.weight", "100"),
    ("cpu.max", "max 100000"),
];

fn pods() -> Vec<PodSpecView> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ls-redis.json"
    ))
    .expect("fixture");
    let pod: Pod = serde_json::from_str(&text).expect("pod");
    let base = PodSpecView::from_pod(&pod).expect("view");
    (0..PODS)
        .map(|i| {
            let mut v = base.clone();
            v.uid = format!("{i:08x}-0000-4000-8000-{i:012x}");
            for (k, c) in v.containers.iter_mut().enumerate() {
                c.container_id = Some(format!("containerd://{:064x}", i * 2 + k));
            }
            v
        })
        .collect()
}

/// (Re)writes every cgroup directory with the kernel defaults, `kubepods` and the QoS-class
/// directories included.
fn seed(layout: &Layout, pods: &[PodSpecView]) {
    for qos in [KubeQos::Burstable, KubeQos::BestEffort, KubeQos::Guaranteed] {
        let dir = layout
            .dir(&layout.qos_parent_dir(qos), Controller::Memory)
            .expect("dir");
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (f, val) in DEFAULTS {
            std::fs::write(dir.join(f), val).expect("seed");
        }
    }
    for v in pods {
        let pod_rel = layout.pod_dir(&v.uid, v.kube_qos).expect("pod");
        let mut rels = vec![pod_rel.clone()];
        for c in &v.containers {
            let id = ContainerId::parse(c.container_id.as_deref().expect("id")).expect("id");
            rels.push(pod_rel.join(layout.container_leaf(&id)));
        }
        for rel in rels {
            let dir = layout.dir(&rel, Controller::Memory).expect("dir");
            std::fs::create_dir_all(&dir).expect("mkdir");
            for (f, val) in DEFAULTS {
                std::fs::write(dir.join(f), val).expect("seed");
            }
        }
    }
}

fn apply_all(applier: &Applier, pods: &[PodSpecView]) -> usize {
    applier
        .apply_all(pods)
        .iter()
        .map(|r| r.count(Outcome::Written))
        .sum()
}

/// cgroupfs lives in memory, so the fair stand-in is tmpfs (`/dev/shm`), not a disk-backed
/// `/tmp` whose journal makes every truncating write a metadata update.
fn tree_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("tmp in /dev/shm")
    } else {
        tempfile::tempdir().expect("tmp")
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tree_dir();
    let layout = Layout::new(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let pods = pods();
    seed(&layout, &pods);
    let mut g = c.benchmark_group("apply");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.bench_function("first_apply_1000_pods_x2", |b| {
        b.iter_batched(
            || {
                seed(&layout, &pods);
                Applier::new(layout.clone(), false, None)
            },
            |applier| {
                let written = apply_all(&applier, &pods);
                assert_eq!(written, PODS * 8);
                // Returned so criterion drops it untimed: closing the ~11,000 kept knob fds
                // is process exit in real life, not part of an apply.
                applier
            },
            BatchSize::PerIteration,
        )
    });
    let applier = Applier::new(layout.clone(), false, None);
    apply_all(&applier, &pods);
    g.bench_function("resync_nothing_to_change_1000_pods_x2", |b| {
        b.iter(|| assert_eq!(apply_all(&applier, &pods), 0))
    });
    // What `run` adds after each resync: burstable's 1,000 children and kubepods' 3 read
    // (2 files each), sums compared, nothing written (asserted).
    let ancestors = MemoryAncestors::new(layout.clone(), false, KubeletMemoryQos::Off, None);
    ancestors.reconcile();
    g.bench_function("ancestors_nothing_to_change_1000_pods", |b| {
        b.iter(|| {
            let r = ancestors.reconcile();
            assert_eq!(r.count(Outcome::Written), 0);
            assert_eq!(r.cgroups[0].children, PODS);
        })
    });
    // What `run` does every `--ancestors-check-ms` (0.25 s) between passes: the files the last
    // pass left read again, none moved (asserted).
    g.bench_function("ancestors_drift_check", |b| {
        b.iter(|| assert_eq!(ancestors.put_back_moved(), None))
    });
    // Where a resync's time goes: the pure part (parse, validate, build) and the file reads.
    g.bench_function("plan_only_1000_pods_x2", |b| {
        b.iter(|| {
            pods.iter()
                .map(|p| {
                    let q = koord_api::ResolvedQos::from_annotation(
                        p.resolved_qos.as_deref().expect("annotated"),
                    )
                    .expect("valid");
                    koord_translator::pod::plan::plan(
                        &q,
                        p,
                        &layout,
                        koord_translator::pod::plan::NodeCaps::default(),
                    )
                    .expect("plan")
                    .writes
                    .len()
                })
                .sum::<usize>()
        })
    });
    let paths: Vec<std::path::PathBuf> = pods
        .iter()
        .flat_map(|p| {
            let q = koord_api::ResolvedQos::from_annotation(
                p.resolved_qos.as_deref().expect("annotated"),
            )
            .expect("valid");
            koord_translator::pod::plan::plan(
                &q,
                p,
                &layout,
                koord_translator::pod::plan::NodeCaps::default(),
            )
            .expect("plan")
            .writes
            .into_iter()
            .map(|w| w.path())
        })
        .filter(|p| p.exists())
        .collect();
    g.bench_function("read_by_full_path_baseline", |b| {
        b.iter(|| {
            paths
                .iter()
                .filter(|p| {
                    koord_translator::cgroup::file::read(p)
                        .ok()
                        .flatten()
                        .is_some()
                })
                .count()
        })
    });
    g.finish();
    eprintln!("supported knob files read per resync: {}", paths.len());
    check_root(tmp.path());
}

fn check_root(p: &Path) {
    assert!(p.join("kubepods.slice").is_dir());
}

criterion_group!(benches, bench);
criterion_main!(benches);
