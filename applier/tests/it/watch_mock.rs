//! `run` against an in-process fake API server (tower-test): the pod list and watch use the
//! node field selector, a listed pod is applied to the cgroup tree, and an Event is posted.

use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::time::Duration;

use common::fake_api::{FakeApi, Serves};
use common::{Kernel, fixture, layout, make_pod_tree, read};

#[tokio::test]
async fn watches_node_pods_applies_and_posts_event() {
    koord_runtime::install_crypto_provider();
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    let pod = fixture("ls-redis.json");
    make_pod_tree(
        &l,
        Kernel::MainlineV2,
        &PodSpecView::from_pod(&pod).expect("view"),
    );

    let mut api = FakeApi::start(Serves {
        pods: vec![serde_json::to_value(&pod).expect("pod json")],
        ..Serves::default()
    });
    let config = common::run_config(tmp.path(), CgroupDriver::Systemd);
    let run = common::watch_settings("node-1", "127.0.0.1:0".parse().expect("addr"));
    let applier = tokio::spawn(koord_applier::cmd::run::run_with_client(
        config,
        run,
        api.client.clone(),
    ));

    let mut uris = Vec::new();
    let event = api
        .wait_for(Duration::from_secs(10), |r| {
            uris.push(r.uri.clone());
            (r.method == http::Method::POST
                && r.uri
                    .contains("/apis/events.k8s.io/v1/namespaces/shop/events"))
            .then(|| r.body.clone())
            .flatten()
        })
        .await
        .expect("an event within 10 s");
    applier.abort();

    let list_uri = uris
        .iter()
        .find(|u| u.starts_with("/api/v1/pods?"))
        .expect("a pod list");
    assert!(
        list_uri.contains("fieldSelector=spec.nodeName%3Dnode-1"),
        "{list_uri}"
    );
    assert!(
        uris.iter()
            .filter(|u| u.contains("watch=true"))
            .all(|u| u.contains("fieldSelector=spec.nodeName%3Dnode-1"))
    );
    let redis = tmp.path().join(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice/\
         cri-containerd-a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90.scope/memory.high",
    );
    assert_eq!(read(&redis), "83886080");
    assert_eq!(event["reason"], "MemoryQOSApplied");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["name"], "redis-0");
    assert_eq!(event["reportingController"], "koordinator.sh/koord-applier");
    assert!(
        event["note"]
            .as_str()
            .unwrap_or("")
            .contains("redis memory.min=52428800"),
        "{event}"
    );
}
