//! An in-place resize on a temporary v2 tree (docs/contract.md §6, Resize): the annotation
//! that passed before the resize is held, not refused as a forgery; one that matches the
//! kubelet's allocated memory is held; one that never matched anything is refused; a held
//! pod keeps (and restores) the values last applied and writes nothing new.

use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use common::{Kernel, fixture, layout, make_pod_tree, snapshot};
use serde_json::{Value, json};

/// The LS fixture with redis at `spec_mi` in the spec and `status_mi` in the kubelet's status.
fn resized(spec_mi: i64, status_mi: i64) -> PodSpecView {
    let mut pod: Value = serde_json::to_value(fixture("ls-redis.json")).expect("json");
    let res = |mi: i64| {
        json!({"requests": {"cpu": "100m", "memory": format!("{mi}Mi")},
               "limits": {"memory": format!("{}Mi", 2 * mi)}})
    };
    pod["spec"]["containers"][0]["resources"] = res(spec_mi);
    for cs in pod["status"]["containerStatuses"]
        .as_array_mut()
        .expect("statuses")
    {
        if cs["name"] == "redis" {
            cs["resources"] = res(status_mi);
        }
    }
    PodSpecView::from_pod(&serde_json::from_value(pod).expect("pod")).expect("view")
}

#[test]
fn a_resize_holds_the_last_good_values_instead_of_refusing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let before = resized(50, 50);
    make_pod_tree(&l, Kernel::MainlineV2, &before);
    let applier = Applier::new(l.clone(), false, None);
    assert_eq!(applier.apply(&before).status, PodStatus::Applied);
    let applied = snapshot(tmp.path());

    // Resize down in progress: the spec says 25Mi, the container still holds 50Mi.
    let r = applier.apply(&resized(25, 50));
    assert_eq!(r.status, PodStatus::Held, "{r:?}");
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|m| m.starts_with("in-place resize not finished")),
        "{r:?}"
    );
    assert_eq!(snapshot(tmp.path()), applied, "nothing new written");

    // Done: the kubelet reports 25Mi, the annotation has not followed yet; it passed before.
    let done = resized(25, 25);
    let r = applier.apply(&done);
    assert_eq!(r.status, PodStatus::Held, "{r:?}");
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|m| m.starts_with("the pod was resized and its annotation predates it")),
        "{r:?}"
    );
    assert_eq!(snapshot(tmp.path()), applied);

    // A value changed behind the applier's back is restored from the held plan.
    let redis_min = r
        .knobs
        .iter()
        .find(|k| k.knob == "memory.min" && format!("{:?}", k.target).contains("redis"))
        .map(|k| k.path.to_string())
        .expect("redis memory.min in the held plan");
    std::fs::write(&redis_min, "0\n").expect("tamper");
    let r = applier.apply(&done);
    assert_eq!(r.status, PodStatus::Held);
    assert_eq!(snapshot(tmp.path()), applied, "restored");

    // The same pod on an applier that never saw it pass: above the spec and the allocated
    // memory, it is refused as before.
    let fresh = Applier::new(l, false, None);
    assert_eq!(fresh.apply(&done).status, PodStatus::Refused);
}
