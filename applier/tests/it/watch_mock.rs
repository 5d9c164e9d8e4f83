//! `run` against an in-process fake API server (tower-test): the pod list and watch use the
//! node field selector, a listed pod is applied to the cgroup tree, and an Event is posted.

use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::time::Duration;

use common::{Kernel, fixture, layout, make_pod_tree, read};
use http::{Request, Response, StatusCode};
use kube::client::Body;

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

    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let config = common::run_config(tmp.path(), CgroupDriver::Systemd);
    let run = common::watch_settings("node-1", "127.0.0.1:0".parse().expect("addr"));
    let applier = tokio::spawn(koord_applier::cmd::run::run_with_client(
        config, run, client,
    ));

    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "100"},
        "items": [serde_json::to_value(&pod).expect("pod json")]
    });
    let mut uris = Vec::new();
    let mut held_watches = Vec::new();
    let event = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (req, send) = handle.next_request().await.expect("a request");
            let uri = req.uri().to_string();
            uris.push(uri.clone());
            if req.method() == http::Method::POST
                && uri.contains("/apis/events.k8s.io/v1/namespaces/shop/events")
            {
                let body = req.into_body().collect_bytes().await.expect("body");
                send.send_response(
                    Response::builder()
                        .status(StatusCode::CREATED)
                        .body(Body::from(body.to_vec()))
                        .expect("resp"),
                );
                break serde_json::from_slice::<serde_json::Value>(&body).expect("event json");
            } else if uri.contains("watch=true") {
                // Keep the watch open and silent.
                held_watches.push(send);
            } else {
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&list).expect("list")))
                        .expect("resp"),
                );
            }
        }
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
