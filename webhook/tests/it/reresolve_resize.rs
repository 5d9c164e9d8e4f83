//! In-place resize end to end against the fake API server: the re-resolver (Lease, pass, pod
//! watch) runs as `serve` runs it; 20 running pods are resized up and down (the spec first,
//! then the status the kubelet reports) and each annotation follows the allocated memory
//! within seconds; a pending resize (spec only) and a CPU-only resize change nothing. Prints
//! the resize -> annotation time p50/p99.

use crate::fake_apiserver;
use crate::server_support::percentile;

use std::time::{Duration, Instant};

use fake_apiserver::pods::FakePods;
use k8s_openapi::api::core::v1::Namespace;
use koord_api::ResolvedQos;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use koord_webhook::reresolve::controller::{self, LeaseConfig, ReresolveConfig};
use koord_webhook::reresolve::lease::LeaseTiming;
use kube::core::PartialObjectMeta;
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};

const MI: i64 = 1024 * 1024;
const NS: &str = "apps";
const PODS: usize = 20;

fn resources(cpu: &str, mi: i64) -> Value {
    json!({"requests": {"cpu": cpu, "memory": format!("{mi}Mi")}, "limits": {"memory": format!("{}Mi", 2 * mi)}})
}

/// A running Burstable pod the kubelet reports at `mi`, not yet resolved.
fn running_pod(i: usize, mi: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("web-{i}"), "namespace": NS, "uid": format!("uid-{i}"),
                        "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "app", "image": "pause", "resources": resources("500m", mi)}]},
           "status": {"phase": "Running", "qosClass": "Burstable",
                      "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                          "image": "pause", "imageID": "", "containerID": format!("containerd://{i:064x}"),
                          "resources": resources("500m", mi)}]}})
}

fn min_of(pod: &Value) -> Option<i64> {
    let text = pod["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS].as_str()?;
    let q = ResolvedQos::from_annotation(text).ok()?;
    Some(q.memory_qos.containers.get("app")?.min)
}

fn config() -> ReresolveConfig {
    ReresolveConfig {
        // Far away: only the election's pass and the pod watch act during the test.
        interval: Duration::from_secs(3600),
        qps: 200.0,
        burst: 50,
        dry_run: false,
        debounce: Duration::from_millis(50),
        event_window: Duration::from_secs(60),
        lease: LeaseConfig {
            name: "koord-webhook-reresolver".into(),
            namespace: "kube-system".into(),
            identity: "test-replica".into(),
            timing: LeaseTiming::new(
                Duration::from_secs(10),
                Duration::from_secs(8),
                Duration::from_millis(500),
            )
            .expect("timing"),
        },
    }
}

type NamespaceWriter = reflector::store::Writer<PartialObjectMeta<Namespace>>;

/// The opted-in namespace, as the Namespace reflector of `serve` holds it; the writer must
/// live as long as the store is read.
fn namespace_store() -> (
    reflector::Store<PartialObjectMeta<Namespace>>,
    NamespaceWriter,
) {
    let (store, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let ns: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"koordinator.sh/qos-webhook": "enabled"}}}))
    .expect("namespace");
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(ns));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

async fn until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// Resizes every pod to `mi` (the spec, then the kubelet's status) and returns the time from
/// the status update to the annotation that follows it, per pod, sorted.
async fn resize_all(fake: &FakePods, mi: i64) -> Vec<Duration> {
    let mut started = Vec::with_capacity(PODS);
    for i in 0..PODS {
        let name = format!("web-{i}");
        fake.update(NS, &name, |p| {
            p["spec"]["containers"][0]["resources"] = resources("500m", mi);
        });
        fake.update(NS, &name, |p| {
            p["status"]["containerStatuses"][0]["resources"] = resources("500m", mi);
        });
        started.push((name, Instant::now()));
    }
    let mut times = Vec::with_capacity(PODS);
    for (name, at) in started {
        until(
            &format!("{name} at {mi}Mi"),
            Duration::from_secs(10),
            || fake.pod(NS, &name).and_then(|p| min_of(&p)) == Some(mi * MI),
        )
        .await;
        times.push(at.elapsed());
    }
    times.sort();
    times
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_follow_in_place_resizes_within_seconds() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            std::env::var("RUST_LOG").unwrap_or_else(|_| "koord_webhook=info".to_owned()),
        )
        .try_init();
    let fake = FakePods::new();
    for i in 0..PODS {
        fake.put(running_pod(i, 512));
    }
    let addr = fake.serve().await;
    let client = fake_apiserver::client(addr);
    let (namespaces, _writer) = namespace_store();
    let config = config();
    let st = crate::fake_apiserver::reresolver_state(100);
    let election = controller::Election::spawn(
        client.clone(),
        config.lease.clone(),
        st.metrics.reresolve.clone(),
    );
    let running = controller::spawn(
        client,
        st,
        namespaces,
        config,
        controller::triggers(),
        election.leadership.clone(),
    );

    // The election's pass resolves the pods (admitted while the webhook was down).
    until("the first pass", Duration::from_secs(20), || {
        (0..PODS)
            .all(|i| fake.pod(NS, &format!("web-{i}")).and_then(|p| min_of(&p)) == Some(512 * MI))
    })
    .await;
    let after_pass = fake.patches();
    assert_eq!(after_pass, PODS as u64);

    // A pending resize: the spec moves, the kubelet's status does not. Nothing changes.
    fake.update(NS, "web-0", |p| {
        p["spec"]["containers"][0]["resources"] = resources("500m", 4096);
        p["status"]["conditions"] =
            json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
    });
    // A CPU-only resize, carried out: nothing in the annotation depends on it.
    fake.update(NS, "web-1", |p| {
        p["spec"]["containers"][0]["resources"] = resources("2", 512);
        p["status"]["containerStatuses"][0]["resources"] = resources("2", 512);
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.patches(),
        after_pass,
        "a pending or CPU-only resize writes nothing"
    );
    assert_eq!(
        fake.pod(NS, "web-0").and_then(|p| min_of(&p)),
        Some(512 * MI)
    );
    fake.update(NS, "web-0", |p| {
        p["spec"]["containers"][0]["resources"] = resources("500m", 512);
        p["status"]["conditions"] = json!([]);
    });

    let up = resize_all(&fake, 1024).await;
    let down = resize_all(&fake, 256).await;
    let mut all: Vec<Duration> = up.iter().chain(&down).copied().collect();
    all.sort();
    println!(
        "resize -> annotation over {} resizes of {PODS} pods (fake API server): p50 {:?}, p99 {:?}, max {:?}",
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all[all.len() - 1]
    );
    assert!(
        percentile(&all, 0.99) < Duration::from_secs(5),
        "p99 {:?}",
        percentile(&all, 0.99)
    );
    // One patch per pod and resize, nothing more.
    assert_eq!(fake.patches(), after_pass + 2 * PODS as u64);
    // The resize Events say so.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let notes: Vec<String> = fake
        .events()
        .iter()
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("in-place resize: ")),
        "{notes:?}"
    );
    running.finish();
    election.finish().await;
}
