//! `run` against an in-process fake API server: after the initial list the ancestors hold the
//! sum of the pods' protection and the LS pod is told so in one Event; a DELETED watch event
//! (its cgroup removed by the kubelet) shrinks the sums within the coalescing delay, and the
//! kubelet's restart zeroing `kubepods` is undone within the ancestors check, both without
//! waiting for the resync.

use koord_translator::cgroup::layout::KubeQos;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::time::Duration;

use common::fake_api::{FakeApi, Serves};
use common::{Kernel, ancestor_dirs, fixture, layout, make_pod_tree, read};

/// ls-redis.json: pod-level memory.min = memory.low = 70 MiB.
const REDIS_POD: &str = "73400320";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ancestors_follow_the_list_and_shrink_after_a_deletion() {
    koord_runtime::install_crypto_provider();
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let pod = fixture("ls-redis.json");
    let view = PodSpecView::from_pod(&pod).expect("view");
    make_pod_tree(&l, Kernel::MainlineV2, &view);
    let [burstable, _, kubepods] = ancestor_dirs(&l);
    let pod_dir = l
        .dir(
            &l.pod_dir(&view.uid, KubeQos::Burstable).expect("pod"),
            Controller::Memory,
        )
        .expect("dir");

    let config = common::run_config(tmp.path(), CgroupDriver::Systemd);
    // Resync far away: what happens below is the list and the deletion, not a resync.
    let mut run = common::watch_settings("node-1", "127.0.0.1:0".parse().expect("addr"));
    run.ancestors_check = Some(Duration::from_millis(200));
    // The fake API server: the list holds the pod; the first watch answers DELETED when the
    // test says so; every posted Event is reported.
    let mut api = FakeApi::start(Serves {
        pods: vec![serde_json::to_value(&pod).expect("pod json")],
        ..Serves::default()
    });
    let applier = tokio::spawn(koord_applier::cmd::run::run_with_client(
        config,
        run,
        api.client.clone(),
    ));

    // Two Events for the pod: its own pass, then what its ancestors now hold.
    let mut notes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while notes.len() < 2 {
            let ev = api
                .next_event(Duration::from_secs(10))
                .await
                .expect("an Event");
            assert_eq!(ev["reason"], "MemoryQOSApplied", "{ev}");
            assert_eq!(ev["regarding"]["name"], "redis-0");
            notes.push(ev["note"].as_str().unwrap_or_default().to_owned());
        }
    })
    .await
    .expect("two Events within 10 s");
    assert!(
        notes[0].starts_with("cgroup v2: pod memory.min=73400320"),
        "{notes:?}"
    );
    assert_eq!(
        notes[1],
        format!(
            "cgroup v2: QoS-level protection (sum of the children): \
             kubepods.slice/kubepods-burstable.slice memory.min={REDIS_POD} memory.low={REDIS_POD}; \
             kubepods.slice memory.min={REDIS_POD} memory.low={REDIS_POD}"
        )
    );
    for dir in [&burstable, &kubepods] {
        for f in ["memory.min", "memory.low"] {
            assert_eq!(read(&dir.join(f)), REDIS_POD, "{}", dir.display());
        }
    }

    // The kubelet restarts with its MemoryQoS gate on (the 1.37 default): it writes 0 into
    // kubepods' memory.min/memory.low and the Burstable class's memory.low. Back at the sums
    // within the check's period, not at the hour-long resync.
    // The Burstable class's memory.low is caught mid-write by the repair pass the zeroed
    // kubepods files start: a plain file of this tree reads empty between the truncation and
    // the write (cgroupfs never does). That pass decides nothing there, and the check must keep
    // watching the file until it parses (the last file written: no later drift rescues it).
    // Without that this test failed about one run in seven when the machine was busy.
    let torn = std::fs::File::create(burstable.join("memory.low")).expect("truncate");
    std::fs::write(kubepods.join("memory.min"), "0").expect("zero");
    std::fs::write(kubepods.join("memory.low"), "0").expect("zero");
    tokio::time::sleep(Duration::from_millis(600)).await;
    std::io::Write::write_all(&mut &torn, b"0").expect("zero");
    drop(torn);
    let zeroed = std::time::Instant::now();
    let repaired = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if [&burstable, &kubepods].iter().all(|d| {
                read(&d.join("memory.min")) == REDIS_POD && read(&d.join("memory.low")) == REDIS_POD
            }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        repaired.is_ok(),
        "kubepods still zeroed {:?} later",
        zeroed.elapsed()
    );
    assert!(
        zeroed.elapsed() < Duration::from_secs(2),
        "repaired {:?} after the zeroing (check every 200 ms)",
        zeroed.elapsed()
    );

    // The kubelet removes the pod's cgroup, the API server says DELETED: the sums go to 0
    // within the coalescing delay (2 s), long before the hour-long resync.
    std::fs::remove_dir_all(&pod_dir).expect("rm pod");
    api.delete_pods();
    let shrunk = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if [&burstable, &kubepods]
                .iter()
                .all(|d| read(&d.join("memory.min")) == "0" && read(&d.join("memory.low")) == "0")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(shrunk.is_ok(), "the sums did not shrink after the deletion");
    // The deleted pod gets no Event about it, and nobody else was told.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late: Vec<_> = api
        .drain()
        .into_iter()
        .filter(|r| r.uri.contains("/events"))
        .collect();
    assert!(late.is_empty(), "no Event after the deletion: {late:?}");
    applier.abort();
}
