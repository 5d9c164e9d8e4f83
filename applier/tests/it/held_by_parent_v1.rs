//! Issue #8: BE CPU suppression (colocation, policy `cfsQuota`) lowers the BE parent's
//! `cpu.cfs_quota_us` and every larger child quota under it. The core applier's resync then
//! wants the BE pod's own quota back; cgroup v1 refuses it (EINVAL, child above parent). That
//! must be the outcome `held` (not `failed`, no Event, counted in metrics), and once the parent
//! is lifted the next resync writes the pod's quota again, with colocation's own restore
//! agreeing with it.
//!
//! On this machine's REAL cgroup v1 `cpu` and `memory` hierarchies, under
//! `/sys/fs/cgroup/{cpu,memory}/koord-held-<pid>-<nanos>/kubepods/besteffort/pod<uid>/<id>`,
//! removed afterwards (leaves first), also on failure. Needs root and cgroup v1; otherwise
//! is ignored unless run with --ignored (`make unit` does where the machine has them).

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::real_v1::{RealV1Tree, V1, require_usable};
use common::{fixture, read};
use koord_applier::metrics::Metrics;
use koord_applier::node::colocation::suppress::BeParent;
use koord_translator::cgroup::Outcome;
use koord_translator::pod::apply::Applier;
use koord_translator::pod::events::event_for;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

const FF: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn held_count(m: &Metrics) -> u64 {
    m.apply
        .writes
        .with_label_values(&["cpu.cfs_quota_us", "held"])
        .get()
}

#[test]
#[ignore = "needs root and cgroup v1 (memory, cpu)"]
fn quota_held_by_suppressed_be_parent_then_written_when_lifted() {
    require_usable();
    let view = PodSpecView::from_pod(&fixture("be-transcode.json")).expect("view");
    let tree = RealV1Tree::for_pod("koord-held", &view);
    let (name, layout) = (tree.name.clone(), tree.layout.clone());
    let pod_rel = layout.pod_dir(&view.uid, view.kube_qos).expect("pod dir");
    let cpu = Path::new(V1).join("cpu").join(&name);
    let be_quota = cpu.join("kubepods/besteffort/cpu.cfs_quota_us");
    let pod_quota = cpu.join(&pod_rel).join("cpu.cfs_quota_us");
    let ctr_quota = cpu.join(&pod_rel).join(FF).join("cpu.cfs_quota_us");

    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let applier = Applier::new(layout.clone(), false, Some(metrics.apply.clone()));
    let first = applier.apply(&view);
    assert_eq!(first.status, PodStatus::Applied, "{first:#?}");
    assert_eq!(read(&pod_quota), "7100000");
    assert_eq!(read(&ctr_quota), "7000000");

    // Colocation suppresses BE pods to 2 CPUs: the kernel refuses the parent below its
    // children, so suppress.rs lowers them first (deepest first) and remembers their values.
    let be = BeParent::new(&layout).expect("be parent");
    let applied = be.set_quota(200_000).expect("suppress");
    assert_eq!(read(&be_quota), "200000");
    assert_eq!(read(&pod_quota), "200000");
    assert_eq!(read(&ctr_quota), "200000");
    assert_eq!(applied.lowered.len(), 2, "{:?}", applied.lowered);

    // Resyncs while suppressed: the pod's and the container's quota are held, not failed.
    for pass in 0..2 {
        let r = applier.apply(&view);
        assert_eq!(r.status, PodStatus::Unchanged, "pass {pass}: {r:#?}");
        assert_eq!(r.count(Outcome::Failed), 0, "pass {pass}: {r:#?}");
        assert_eq!(r.count(Outcome::Held), 2, "pass {pass}: {r:#?}");
        assert_eq!(r.count(Outcome::Written), 0, "pass {pass}: {r:#?}");
        for k in r.knobs.iter().filter(|k| k.outcome == Outcome::Held) {
            assert_eq!(k.file, "cpu.cfs_quota_us");
            assert_eq!(k.old.as_deref(), Some("200000"));
            let reason = k.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("held by the parent quota"), "{reason}");
        }
        assert!(
            event_for(&r).is_none(),
            "no Event while held: {:?}",
            event_for(&r)
        );
        assert_eq!(read(&pod_quota), "200000", "the applier must not fight");
        assert_eq!(read(&ctr_quota), "200000");
        assert_eq!(held_count(&metrics), 2 * (pass + 1));
    }
    assert_eq!(
        metrics
            .apply
            .writes
            .with_label_values(&["cpu.cfs_quota_us", "failed"])
            .get(),
        0
    );

    // Suppression lifted: the next resync writes the pod's own quotas (pod before container).
    let lifted = be.set_quota(-1).expect("lift");
    assert!(lifted.changed);
    assert_eq!(read(&be_quota), "-1");
    let r = applier.apply(&view);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    assert_eq!(r.count(Outcome::Held), 0, "{r:#?}");
    assert_eq!(r.count(Outcome::Written), 2, "{r:#?}");
    assert_eq!(read(&pod_quota), "7100000");
    assert_eq!(read(&ctr_quota), "7000000");

    // Colocation's own restore (what the engine does after a lift) agrees with the applier:
    // it writes the values it saw before lowering, which are the desired ones, so the next
    // resync has nothing to do.
    let waiting = be.restore_quotas(applied.lowered, -1);
    assert!(waiting.is_empty());
    let r = applier.apply(&view);
    assert_eq!(r.count(Outcome::Written), 0, "{r:#?}");
    assert_eq!(r.status, PodStatus::Unchanged);
}
