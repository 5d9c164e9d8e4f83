//! Resync keeps each knob file open and re-reads it with one `pread`. These check that the
//! guarantees of the plain read-compare-write still hold: the files are read every pass (drift
//! is repaired), a cgroup directory replaced behind our back (container restart with the same
//! path, pod cgroup recreated) is reopened, a new container ID moves to the new directory,
//! and a changed annotation is planned again.

use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use common::{Kernel, fixture, layout, make_pod_tree, read, with_runtime};

const REDIS: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const POD: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice";

fn view() -> PodSpecView {
    PodSpecView::from_pod(&with_runtime(fixture("ls-redis.json"), "containerd")).expect("view")
}

#[test]
fn replaced_container_dir_is_reopened_and_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let v = view();
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let applier = Applier::new(l.clone(), false, None);
    assert_eq!(applier.apply(&v).status, PodStatus::Applied);
    assert_eq!(applier.apply(&v).count(Outcome::Written), 0);
    assert_eq!(applier.cached_pods(), 1);
    // The container's directory disappears: missing, not a stale read of the old file.
    let ctr = tmp
        .path()
        .join(POD)
        .join(format!("cri-containerd-{REDIS}.scope"));
    std::fs::remove_dir_all(&ctr).expect("rm container dir");
    let r = applier.apply(&v);
    assert!(r.count(Outcome::Missing) > 0, "{r:#?}");
    assert_eq!(r.count(Outcome::Unchanged) + r.count(Outcome::Written), 7);
    // ... and comes back with the kernel defaults (make_pod_tree re-seeds every cgroup of the
    // pod): the next pass writes all our values again, 2 at pod level and 3 per container.
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    assert_eq!(read(&ctr.join("memory.high")), "max");
    let r = applier.apply(&v);
    assert_eq!(r.count(Outcome::Written), 8, "{r:#?}");
    assert_eq!(read(&ctr.join("memory.high")), "83886080");
    assert_eq!(applier.apply(&v).count(Outcome::Written), 0);
}

#[test]
fn new_container_id_and_changed_annotation_are_planned_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let mut v = view();
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let applier = Applier::new(l.clone(), false, None);
    applier.apply(&v);
    // Container restarted: a new ID, a new directory.
    let new_id = "b".repeat(64);
    let c = v
        .containers
        .iter_mut()
        .find(|c| c.container_id.is_some())
        .expect("started container");
    c.container_id = Some(format!("containerd://{new_id}"));
    // make_pod_tree re-seeds every cgroup of the pod with the kernel defaults.
    make_pod_tree(&l, Kernel::MainlineV2, &v);
    let r = applier.apply(&v);
    assert_eq!(r.count(Outcome::Written), 8, "{r:#?}");
    let fresh = tmp
        .path()
        .join(POD)
        .join(format!("cri-containerd-{new_id}.scope"));
    assert_eq!(read(&fresh.join("memory.high")), "83886080");
    // The annotation changes: memory.high follows.
    let raw = v.resolved_qos.clone().expect("annotated");
    assert!(raw.contains("83886080"));
    v.resolved_qos = Some(raw.replace("83886080", "79691776"));
    let r = applier.apply(&v);
    assert_eq!(r.count(Outcome::Written), 1, "{r:#?}");
    assert_eq!(read(&fresh.join("memory.high")), "79691776");
    applier.forget(&v.uid);
    assert_eq!(applier.cached_pods(), 0);
    assert_eq!(applier.apply(&v).count(Outcome::Written), 0);
}
