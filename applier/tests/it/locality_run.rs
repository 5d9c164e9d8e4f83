//! The locality worker of `run`: it reads the watch's pod cache, runs a pass when a pod is due
//! (start, annotation change) and posts its Event through the Event sink channel.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_applier::event_sink::SinkMsg;
use koord_applier::node::numa::LocalityConfig;
use koord_applier::node::numa::locality::Migrator;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use kube::runtime::reflector;
use kube::runtime::watcher;
use tokio::sync::mpsc;

const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn pod(locality: &str) -> Pod {
    let resolved = format!(
        r#"{{"version":1,"qosClass":"LS","qosClassSource":"label","memoryQOS":{{"enabled":false,"policy":"none","source":"default","params":{{"minLimitPercent":0,"lowLimitPercent":0,"throttlingPercent":0,"wmarkRatio":95,"wmarkMinAdj":0,"wmarkScalePermill":20,"priority":0,"priorityEnable":0,"oomKillGroup":0}},"pod":{{"memory.min":0,"memory.low":0}},"containers":{{}}}},"memoryLocality":{locality}}}"#
    );
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "redis-0", "namespace": "shop", "uid": UID,
                     "annotations": {"koordinator.sh/resolved-qos": resolved}},
        "spec": {"containers": [{"name": "app"}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
            {"name": "app", "containerID": format!("containerd://{CID}"), "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    }))
    .expect("pod")
}

async fn next_event(
    rx: &mut mpsc::Receiver<SinkMsg>,
    within: Duration,
) -> Option<(String, String)> {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(SinkMsg::Event(ev))) => Some((ev.reason.to_owned(), ev.message)),
        _ => None,
    }
}

#[tokio::test]
async fn posts_on_start_and_on_change_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // One-node sysfs; the container's cgroup has one process (ourselves).
    std::fs::create_dir_all(root.join("sys/devices/system/node/node0")).expect("mkdir");
    std::fs::write(root.join("sys/devices/system/node/node0/cpulist"), "0-1\n").expect("cpulist");
    let cg = root.join(format!("cg/kubepods/burstable/pod{UID}/{CID}"));
    std::fs::create_dir_all(&cg).expect("mkdir");
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", std::process::id())).expect("procs");
    std::fs::write(cg.join("cpuset.cpus"), "0\n").expect("cpuset");
    let migrator = Migrator::new(
        Layout::new(root.join("cg"), CgroupVersion::V2, CgroupDriver::Cgroupfs),
        "/proc".into(),
        root.join("sys"),
        LocalityConfig::default(),
    );
    let (store, mut writer) = reflector::store::<Pod>();
    writer.apply_watcher_event(&watcher::Event::Apply(pod(
        r#"{"policy":"bestEffort","source":"pod-annotation"}"#,
    )));
    let (tx, mut rx) = mpsc::channel(16);
    let task = tokio::spawn(koord_applier::node::numa::worker::run(
        std::sync::Arc::new(migrator),
        store,
        tx,
        None,
        Duration::from_millis(20),
    ));
    let first = next_event(&mut rx, Duration::from_secs(10)).await;
    assert_eq!(
        first,
        Some((
            "MemoryLocalitySkipped".to_owned(),
            "no target numa".to_owned()
        ))
    );
    // Same pod, same containers: several scans, no second pass.
    assert_eq!(next_event(&mut rx, Duration::from_millis(200)).await, None);
    // The decision changes: a new pass.
    writer.apply_watcher_event(&watcher::Event::Apply(pod(
        r#"{"policy":"bestEffort","migrateIntervalMinutes":10,"source":"pod-annotation"}"#,
    )));
    let again = next_event(&mut rx, Duration::from_secs(10)).await;
    assert_eq!(again.map(|e| e.0), Some("MemoryLocalitySkipped".to_owned()));
    // none: nothing more.
    writer.apply_watcher_event(&watcher::Event::Apply(pod(
        r#"{"policy":"none","source":"pod-annotation"}"#,
    )));
    assert_eq!(next_event(&mut rx, Duration::from_millis(200)).await, None);
    task.abort();
}
