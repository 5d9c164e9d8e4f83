//! Every Event text of the memory locality pass, against the reference's
//! `kubectl describe pod` output (the reference product documentation).

use koord_applier::numa::message::{REASON_COMPLETED, REASON_FAILED, REASON_SKIPPED, event_text};
use koord_applier::numa::numa_maps::Locality;
use koord_applier::numa::report::{ContainerLocality, ContainerStatus, FailedPid, LocalityReport};
use koord_applier::numa::topology::IdSet;
use koord_applier::pod_event::EventKind;

fn nodes(ids: &[u32]) -> IdSet {
    ids.iter().copied().collect()
}

fn completed(
    name: &str,
    remote: &[u32],
    local: &[u32],
    after: (u64, u64, u64),
) -> ContainerLocality {
    let mut c = ContainerLocality::new(name, ContainerStatus::Completed, None);
    c.remote_nodes = nodes(remote);
    c.local_nodes = nodes(local);
    c.after = Some(Locality {
        local_bytes: after.0,
        remote_bytes: after.1,
        remote_pages: after.2,
        remote_nodes: IdSet::new(),
    });
    c
}

fn skipped(name: &str, reason: &str) -> ContainerLocality {
    ContainerLocality::new(name, ContainerStatus::Skipped, Some(reason.to_owned()))
}

#[test]
fn reference_completed_text_byte_for_byte() {
    let cs = [
        completed("<container-name-1>", &[1], &[0], (4096 * 10, 0, 0)),
        completed("<container-name-2>", &[0], &[1], (4096 * 5, 0, 0)),
    ];
    let (kind, reason, msg) = event_text(&cs).expect("an event");
    assert_eq!((kind, reason), (EventKind::Normal, REASON_COMPLETED));
    assert_eq!(reason, "MemoryLocalityCompleted");
    assert_eq!(
        msg,
        "Container <container-name-1> completed: migrated memory from remote numa: 1 to local numa: 0\n\
         Container <container-name-2> completed: migrated memory from remote numa: 0 to local numa: 1\n\
         Total: 2 container(s) completed, 0 failed, 0 skipped; cur local memory ratio 100, rest remote memory pages 0"
    );
}

#[test]
fn skipped_is_the_reference_text() {
    let (kind, reason, msg) = event_text(&[skipped("redis", "no target numa")]).expect("event");
    assert_eq!(
        (kind, reason, msg.as_str()),
        (EventKind::Normal, REASON_SKIPPED, "no target numa")
    );
    assert_eq!(reason, "MemoryLocalitySkipped");
    // Two containers skipped for the same reason: one text, not two.
    let (_, _, msg) = event_text(&[
        skipped("a", "no target numa"),
        skipped("b", "no target numa"),
    ])
    .expect("event");
    assert_eq!(msg, "no target numa");
    let (_, _, msg) = event_text(&[
        skipped("a", "no target numa"),
        skipped("b", "no running process"),
    ])
    .expect("event");
    assert_eq!(msg, "no target numa; no running process");
    assert_eq!(event_text(&[]), None, "no started container, no event");
}

#[test]
fn exited_process_is_reported_not_fatal() {
    let mut c = completed("redis", &[1], &[0], (3 * 4096, 4096, 1));
    c.failed_pids = vec![FailedPid {
        pid: 4242,
        error: "No such process".into(),
    }];
    let (kind, reason, msg) =
        event_text(&[c, skipped("sidecar", "no target numa")]).expect("event");
    assert_eq!((kind, reason), (EventKind::Normal, REASON_COMPLETED));
    assert_eq!(
        msg,
        "Container redis completed: migrated memory from remote numa: 1 to local numa: 0, \
         failed to migrate the following processes: failed pid: 4242, error: No such process\n\
         Total: 1 container(s) completed, 0 failed, 1 skipped; cur local memory ratio 75, rest remote memory pages 1"
    );
}

#[test]
fn failures() {
    let mut perm =
        ContainerLocality::new("redis", ContainerStatus::Failed, Some("pid 7: x".into()));
    perm.failed_pids = vec![
        FailedPid {
            pid: 7,
            error: "Operation not permitted".into(),
        },
        FailedPid {
            pid: 8,
            error: "No such process".into(),
        },
    ];
    let cg = ContainerLocality::new(
        "side",
        ContainerStatus::Failed,
        Some("read /sys/fs/cgroup/x/cgroup.procs: No such file or directory (os error 2)".into()),
    );
    let (kind, reason, msg) = event_text(&[perm.clone(), cg.clone()]).expect("event");
    assert_eq!((kind, reason), (EventKind::Warning, REASON_FAILED));
    assert_eq!(reason, "MemoryLocalityFailed");
    assert_eq!(
        msg,
        "Container redis failed to migrate the following processes: failed pid: 7, error: Operation not permitted; \
         failed pid: 8, error: No such process\n\
         Container side failed: read /sys/fs/cgroup/x/cgroup.procs: No such file or directory (os error 2)\n\
         Total: 0 container(s) completed, 2 failed, 0 skipped"
    );
    // One container completed and one failed: Completed, counting the failure.
    let (kind, reason, msg) =
        event_text(&[completed("a", &[0], &[1], (1, 0, 0)), cg]).expect("event");
    assert_eq!((kind, reason), (EventKind::Normal, REASON_COMPLETED));
    assert!(msg.ends_with("Total: 1 container(s) completed, 1 failed, 0 skipped; cur local memory ratio 100, rest remote memory pages 0"), "{msg}");
    // The report carries the same event and says it failed.
    let r = LocalityReport::new(vec![perm]);
    assert!(r.failed());
    let ev = r.event.expect("event");
    assert_eq!((ev.kind, ev.reason), ("Warning", "MemoryLocalityFailed"));
}

#[test]
fn ratio_is_over_completed_containers_and_rounds_down() {
    let cs = [
        completed("a", &[1], &[0], (999, 1, 1)),
        completed("b", &[1], &[0], (1000, 0, 0)),
    ];
    let (_, _, msg) = event_text(&cs).expect("event");
    assert!(
        msg.ends_with("cur local memory ratio 99, rest remote memory pages 1"),
        "{msg}"
    );
    let cs = [completed("a", &[2, 3], &[0, 1], (0, 0, 0))];
    let (_, _, msg) = event_text(&cs).expect("event");
    assert!(
        msg.starts_with(
            "Container a completed: migrated memory from remote numa: 2-3 to local numa: 0-1\n"
        ),
        "{msg}"
    );
}
