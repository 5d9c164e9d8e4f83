//! The BE swap grant on a tree laid out like mainline cgroup v2 (`memory.swap.max` regular
//! files holding the kubelet's 0): a BE pod's containers get their share of their limit within
//! the node's swap, a reset grant is made again, a larger value stands, an LS pod is never
//! touched, a pod that stops being BE and the applier's exit put the values back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::be_swap::grant::NodeMemory;
use koord_applier::node::be_swap::worker::{PassReport, SwapGrants};
use koord_applier::node::writer::{NodeWriter, record};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common::{Kernel, fixture, layout, make_pod_tree, with_runtime};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const NODE: NodeMemory = NodeMemory {
    mem_total: 16 * GIB,
    swap_total: 4 * GIB,
};

/// The pod's container directories with `memory.swap.max` 0, as the kubelet leaves a
/// BestEffort container under LimitedSwap.
fn seed(l: &Layout, root: &Path, pod: &Pod) -> Vec<PathBuf> {
    let view = PodSpecView::from_pod(pod).expect("view");
    let pod_rel = l.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
    make_pod_tree(l, Kernel::MainlineV2, &view)
        .into_iter()
        .map(|d| root.join(d))
        .filter(|d| *d != root.join(&pod_rel))
        .inspect(|d| std::fs::write(d.join("memory.swap.max"), "0\n").expect("seed"))
        .collect()
}

fn swap_max(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("memory.swap.max"))
        .expect("read")
        .trim()
        .to_owned()
}

#[test]
fn be_containers_get_their_share_and_give_it_back() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let mut be = with_runtime(fixture("be-transcode.json"), "containerd");
    let ls = with_runtime(fixture("ls-redis.json"), "containerd");
    let be_dirs = seed(&l, tmp.path(), &be);
    let ls_dirs = seed(&l, tmp.path(), &ls);
    let (ffmpeg, uploader) = (&be_dirs[0], &be_dirs[1]);
    assert!(ffmpeg.ends_with("1111111111111111111111111111111111111111111111111111111111111111"));
    let mut grants = SwapGrants::new(50, l, Arc::default(), None);

    // 50% of ffmpeg's 22Gi is past the node's 4 GiB of swap; uploader: 50% of its 1Gi.
    let r = grants.pass([&be, &ls], NODE);
    assert_eq!(
        r,
        PassReport {
            granted: 2,
            written: 2,
            errors: 0
        }
    );
    assert_eq!(swap_max(ffmpeg), (4 * GIB).to_string());
    assert_eq!(swap_max(uploader), (512 * MIB).to_string());
    for d in &ls_dirs {
        assert_eq!(
            swap_max(d),
            "0",
            "an LS container was granted swap: {}",
            d.display()
        );
    }

    // Held: nothing written again; a reset grant (systemd re-applying the unit's value) is
    // made again; a larger value stands.
    assert_eq!(grants.pass([&be], NODE).written, 0);
    std::fs::write(ffmpeg.join("memory.swap.max"), "0\n").expect("reset");
    std::fs::write(uploader.join("memory.swap.max"), "max\n").expect("raise");
    let r = grants.pass([&be], NODE);
    assert_eq!(
        r,
        PassReport {
            granted: 2,
            written: 1,
            errors: 0
        }
    );
    assert_eq!(swap_max(ffmpeg), (4 * GIB).to_string());
    assert_eq!(swap_max(uploader), "max");

    // No swap on the node: nothing written.
    std::fs::write(ffmpeg.join("memory.swap.max"), "0\n").expect("reset");
    let no_swap = NodeMemory {
        swap_total: 0,
        ..NODE
    };
    assert_eq!(grants.pass([&be], no_swap).written, 0);
    assert_eq!(swap_max(ffmpeg), "0");
    assert_eq!(grants.pass([&be], NODE).written, 1);

    // The pod is no longer BE: its grants go back to the values before them; a value someone
    // raised above the grant (uploader's `max`) stands.
    let labels = be.metadata.labels.as_mut().expect("labels");
    labels.insert(koord_api::keys::LABEL_QOS_CLASS.to_owned(), "LS".to_owned());
    assert_eq!(
        grants.pass([&be], NODE),
        PassReport {
            granted: 0,
            written: 0,
            errors: 0
        }
    );
    assert_eq!(swap_max(ffmpeg), "0");
    assert_eq!(swap_max(uploader), "max");
    std::fs::write(uploader.join("memory.swap.max"), "0\n").expect("reset");

    // BE again, then the applier exits: every grant back (a value raised since stands), and
    // no pass writes after it.
    labels_be(&mut be);
    assert_eq!(grants.pass([&be], NODE).granted, 2);
    std::fs::write(uploader.join("memory.swap.max"), "max\n").expect("raise");
    assert_eq!(grants.release_all(), 2);
    assert_eq!(
        (swap_max(ffmpeg), swap_max(uploader)),
        ("0".into(), "max".into())
    );
    assert_eq!(grants.pass([&be], NODE).written, 0);
    assert_eq!(swap_max(ffmpeg), "0");
}

#[test]
fn a_grant_whose_container_is_gone_is_forgotten() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let be = with_runtime(fixture("be-transcode.json"), "containerd");
    let dirs = seed(&l, tmp.path(), &be);
    let mut grants = SwapGrants::new(10, l, Arc::default(), None);
    assert_eq!(grants.pass([&be], NODE).granted, 2);
    for d in &dirs {
        std::fs::remove_dir_all(d).expect("rm");
    }
    // The pod deleted with its cgroups: nothing to put back, no error.
    let none: [&Pod; 0] = [];
    assert_eq!(grants.pass(none, NODE), PassReport::default());
    assert_eq!(grants.release_all(), 0);
}

fn labels_be(pod: &mut Pod) {
    let labels = pod.metadata.labels.as_mut().expect("labels");
    labels.insert(koord_api::keys::LABEL_QOS_CLASS.to_owned(), "BE".to_owned());
}

#[test]
fn grants_left_by_a_crash_go_back_at_the_next_start_without_the_flag() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let be = with_runtime(fixture("be-transcode.json"), "containerd");
    let dirs = seed(&l, tmp.path(), &be);
    let root = l
        .dir(&l.kubepods_dir(), Controller::Memory)
        .expect("kubepods");
    if record::keep(&root, "memory.swap.max", "0").is_err() {
        panic!("cannot run: no user xattrs on {}", root.display());
    }
    record::forget(&root, "memory.swap.max").expect("probe dropped");
    // An applier with --be-swap-percent 50 grants, then is killed (nothing released).
    let crashed = Arc::new(NodeWriter::new(false, true));
    let mut grants = SwapGrants::new(50, l.clone(), crashed, None);
    assert_eq!(grants.pass([&be], NODE).written, 2);
    drop(grants);
    assert_ne!(swap_max(&dirs[0]), "0");
    // The next one starts without the flag: its start sweep puts the kubelet's 0 back.
    let restarted = NodeWriter::new(false, true);
    let left = restarted.put_back_left(&root);
    assert_eq!(left.len(), 2, "{left:?}");
    for d in &dirs {
        assert_eq!(swap_max(d), "0", "{}", d.display());
        assert_eq!(record::kept(d, "memory.swap.max"), None);
    }
    assert!(restarted.put_back_left(&root).is_empty());
}
