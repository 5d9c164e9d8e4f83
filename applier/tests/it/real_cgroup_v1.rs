//! The applier on this machine's REAL cgroup v1 hierarchy: kubelet-like children are created
//! under `/sys/fs/cgroup/{memory,cpu}/koord-test-<pid>-<nanos>/` and always removed (Drop guard,
//! leaf first). Needs root and v1 memory + cpu controllers; otherwise it is ignored unless run with --ignored (`make unit` does where the machine has them).

use koord_translator::cgroup::Outcome;
use koord_translator::pod::apply::Applier;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::path::Path;

use common::real_v1::{RealV1Tree, V1, require_usable};
use common::{fixture, read};

/// Removes every created cgroup directory, deepest first, also when the test panics.
#[test]
#[ignore = "needs root and cgroup v1 (memory, cpu)"]
fn real_v1_writes_batch_knobs_and_reports_alibaba_knobs_unsupported() {
    require_usable();
    let view = PodSpecView::from_pod(&fixture("be-transcode.json")).expect("view");
    let tree = RealV1Tree::for_pod("koord-test", &view);
    let (name, layout) = (tree.name.clone(), tree.layout.clone());
    let pod_rel = layout.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
    let applier = Applier::new(layout, false, None);
    let r = applier.apply(&view);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    let ff = "1111111111111111111111111111111111111111111111111111111111111111";
    let c = |ctl: &str, file: &str| {
        Path::new(V1)
            .join(ctl)
            .join(&name)
            .join(&pod_rel)
            .join(ff)
            .join(file)
    };
    let p = |ctl: &str, file: &str| {
        Path::new(V1)
            .join(ctl)
            .join(&name)
            .join(&pod_rel)
            .join(file)
    };
    assert_eq!(read(&c("memory", "memory.limit_in_bytes")), "23622320128");
    assert_eq!(read(&c("cpu", "cpu.shares")), "71680");
    assert_eq!(read(&c("cpu", "cpu.cfs_quota_us")), "7000000");
    assert_eq!(read(&p("memory", "memory.limit_in_bytes")), "24696061952");
    assert_eq!(read(&p("cpu", "cpu.shares")), "72192");
    assert_eq!(read(&p("cpu", "cpu.cfs_quota_us")), "7100000");
    // This kernel is mainline: the Alibaba memcg files do not exist.
    let unsupported = applier.unsupported_knobs();
    for k in [
        "memory.wmark_ratio",
        "memory.wmark_scale_factor",
        "memory.wmark_min_adj",
        "memory.priority",
        "memory.use_priority_oom",
    ] {
        assert!(
            unsupported.contains(&k),
            "{k} should be unsupported here: {unsupported:?}"
        );
    }
    eprintln!("real v1: unsupported on this kernel: {unsupported:?}");
    // Idempotent on the real kernel (it reads back what we wrote).
    let again = applier.apply(&view);
    assert_eq!(again.count(Outcome::Written), 0, "{again:#?}");
    // Drift: lower the quota behind our back; the next pass restores it.
    std::fs::write(c("cpu", "cpu.cfs_quota_us"), "50000").expect("drift");
    let fixed = applier.apply(&view);
    assert_eq!(fixed.count(Outcome::Written), 1);
    assert_eq!(read(&c("cpu", "cpu.cfs_quota_us")), "7000000");
    // Someone unlimits memory (-1 reads back as the page-aligned i64::MAX): restored.
    let mut lim = std::fs::OpenOptions::new()
        .write(true)
        .open(c("memory", "memory.limit_in_bytes"))
        .expect("open");
    std::io::Write::write_all(&mut lim, b"-1").expect("unlimit");
    assert_eq!(
        read(&c("memory", "memory.limit_in_bytes")),
        "9223372036854771712"
    );
    let restored = applier.apply(&view);
    assert_eq!(restored.count(Outcome::Written), 1);
    assert_eq!(read(&c("memory", "memory.limit_in_bytes")), "23622320128");
}
