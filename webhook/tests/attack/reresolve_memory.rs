//! The Lease holder's memory over re-resolution passes of many pods. The re-resolver runs as
//! `serve` runs it (Lease, passes, the pod watch, the Event queue) against the fake API server
//! in a process of its own (this test binary started again with `KOORD_TEST_FAKE_PODS` set),
//! so the figures are the holder's alone: VmRSS and VmHWM of this process after a patching
//! pass, a listing pass (nothing to change), another patching pass and another listing pass.
//!
//! Asserted: every pass checks every pod and patches exactly what changed; the peak stays
//! under 64 MiB and the RSS after the second listing pass is within 4 MiB of the first (flat
//! between passes). The size is `KOORD_RERESOLVE_RSS_PODS` (default 5,000; the benchmark runs
//! 50,000 with a release build: `webhook/benches/reresolve-rss.sh`); `KOORD_RERESOLVE_RSS_THP=1`
//! leaves transparent huge pages on, as the binary had them before, and asserts no budget.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fake_apiserver::pods::FakePods;
use k8s_openapi::api::core::v1::Namespace;
use koord_webhook::live::state::AppState;
use koord_webhook::policy::{ClusterQosConfig, PolicyConfig};
use koord_webhook::reresolve::controller::{self, LeaseConfig, ReresolveConfig};
use koord_webhook::reresolve::lease::LeaseTiming;
use koord_webhook::reresolve::scope::{Scope, Trigger};
use kube::core::PartialObjectMeta;
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};

/// The webhook's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHILD_ENV: &str = "KOORD_TEST_FAKE_PODS";
const HOLDER_ENV: &str = "KOORD_TEST_HOLDER";
const TEST_NAME: &str = "reresolve_memory::holder_memory_is_flat_across_passes";
const PODS_PER_NAMESPACE: usize = 500;

fn pod_count() -> usize {
    std::env::var("KOORD_RERESOLVE_RSS_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

fn namespace_of(i: usize) -> String {
    format!("team-{:03}", i / PODS_PER_NAMESPACE)
}

/// A pod the size of a typical Deployment pod (~4.5 KB stored, two containers, env, mounts,
/// probes), as the e2e suite's memory scenario creates them; running, not yet resolved.
fn realistic_pod(i: usize) -> Value {
    let env: Vec<Value> = (0..12)
        .map(|k| json!({"name": format!("APP_SETTING_{k}"), "value": format!("value-{k}-{}", "x".repeat(24))}))
        .collect();
    let mounts: Vec<Value> = (0..4)
        .map(|k| json!({"name": format!("vol-{k}"), "mountPath": format!("/etc/app/config-{k}")}))
        .collect();
    let probe = json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10});
    let app = json!({"name": "app", "image": "registry.example/app:1.2.3", "env": env,
        "volumeMounts": mounts, "readinessProbe": probe, "livenessProbe": probe,
        "ports": [{"containerPort": 8080, "name": "http"}],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}});
    let proxy = json!({"name": "proxy", "image": "registry.example/proxy:4.5.6",
        "args": ["--listen=:15001", "--upstream=127.0.0.1:8080", "--log-level=info"],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}});
    let volumes: Vec<Value> = (0..4)
        .map(|k| json!({"name": format!("vol-{k}"), "configMap": {"name": format!("app-config-{k}")}}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("app-{i:06}"), "namespace": namespace_of(i),
            "uid": format!("{i:08x}-0000-4000-8000-{i:012x}"),
            "labels": {"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": "app-prod",
                "pod-template-hash": "6d9f8b7c5d", "team": "payments"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}},
        "spec": {"nodeName": format!("node-{:04}", i % 1000), "containers": [app, proxy],
            "volumes": volumes, "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "qosClass": "Burstable"}})
}

/// The child: the fake API server with `n` pods; prints its address, serves until stdin
/// closes (the parent exited or dropped it).
async fn fake_child(n: usize) {
    let fake = FakePods::new();
    fake.count_events_only();
    for i in 0..n {
        fake.put(realistic_pod(i));
    }
    let addr = fake.serve().await;
    println!("fake-apiserver {addr}");
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .expect("stdin");
}

/// The fake's process, killed when dropped.
struct FakeProcess(Child);

impl Drop for FakeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_fake(n: usize) -> (FakeProcess, String) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the fake API server's process");
    let stdout = child.stdout.take().expect("stdout");
    let guard = FakeProcess(child);
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child stdout");
        // libtest's "test <name> ... " precedes it on the same line.
        if let Some((_, a)) = line.split_once("fake-apiserver ") {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    (guard, addr.expect("the fake API server printed no address"))
}

/// VmRSS and VmHWM of this process, KiB.
fn vm() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn policy(min_limit_percent: u32) -> PolicyConfig {
    PolicyConfig {
        cluster: ClusterQosConfig::parse(&format!(
            r#"{{"clusterStrategy": {{"lsClass": {{"memoryQOS": {{"enable": true, "minLimitPercent": {min_limit_percent}}}}}}}}}"#
        ))
        .expect("cluster")
        .config,
        ..PolicyConfig::default()
    }
}

/// The defaults of `serve` but the rate: the holder's memory does not depend on it, the
/// test's time does.
fn config() -> ReresolveConfig {
    ReresolveConfig {
        interval: Duration::from_secs(3600),
        qps: 5_000.0,
        burst: 500,
        dry_run: false,
        debounce: Duration::from_millis(50),
        event_window: Duration::from_secs(600),
        lease: LeaseConfig {
            name: "koord-webhook-reresolver".into(),
            namespace: "kube-system".into(),
            identity: "test-replica".into(),
            timing: LeaseTiming::new(
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2),
            )
            .expect("timing"),
        },
    }
}

type NamespaceWriter = reflector::store::Writer<PartialObjectMeta<Namespace>>;

fn namespace_store(
    count: usize,
) -> (
    reflector::Store<PartialObjectMeta<Namespace>>,
    NamespaceWriter,
) {
    let (store, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for k in 0..count {
        let ns: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace_of(k * PODS_PER_NAMESPACE),
                         "labels": {"koordinator.sh/qos-webhook": "enabled"}}}))
        .expect("namespace");
        writer.apply_watcher_event(&watcher::Event::InitApply(ns));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (store, writer)
}

/// Waits until `passes` passes have completed; returns the time it took.
async fn until_passes(st: &AppState, passes: u64, timeout: Duration) -> Duration {
    let start = Instant::now();
    while st.metrics.reresolve.pass_duration.get_sample_count() < passes {
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for pass {passes}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_memory_is_flat_across_passes() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        fake_child(n.parse().expect("pod count")).await;
        return;
    }
    if std::env::var_os(HOLDER_ENV).is_none() {
        // The other attack tests share this process: the holder runs in a process of its own
        // so VmRSS and VmHWM are its alone.
        let _heavy = crate::child::heavy().await;
        let status = Command::new(std::env::current_exe().expect("test binary"))
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(HOLDER_ENV, "1")
            .status()
            .expect("start the holder's process");
        assert!(status.success(), "the holder's process failed: {status}");
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            std::env::var("RUST_LOG").unwrap_or_else(|_| "koord_webhook=warn".to_owned()),
        )
        .try_init();
    // As `koord-webhook` main does (KOORD_RERESOLVE_RSS_THP=1 leaves them on, for comparison).
    let thp = std::env::var("KOORD_RERESOLVE_RSS_THP").as_deref() == Ok("1");
    if !thp {
        koord_runtime::disable_transparent_huge_pages().expect("prctl(PR_SET_THP_DISABLE)");
    }
    let n = pod_count();
    let namespaces = n.div_ceil(PODS_PER_NAMESPACE);
    let started = Instant::now();
    let (_fake, addr) = start_fake(n);
    eprintln!(
        "fake API server with {n} pods in {namespaces} namespaces up in {:?}",
        started.elapsed()
    );
    let uri: http::Uri = format!("http://{addr}").parse().expect("uri");
    let client = kube::Client::try_from(kube::Config::new(uri)).expect("client");
    let (store, _writer) = namespace_store(namespaces);
    let st = crate::fake_apiserver::reresolver_state(100);
    let config = config();
    let (triggers, rx) = controller::triggers();
    let before = vm();
    let election = controller::Election::spawn(
        client.clone(),
        config.lease.clone(),
        st.metrics.reresolve.clone(),
    );
    let running = controller::spawn(
        client,
        st.clone(),
        store,
        config,
        (triggers.clone(), rx),
        election.leadership.clone(),
    );
    let timeout = Duration::from_secs(60 + n as u64 / 50);
    let patched = || st.metrics.reresolve.pods_patched.get();
    let checked = || st.metrics.reresolve.pods_checked.get();
    let mut rows = Vec::new();
    // (what, the policy for it, pods it must patch)
    let steps: [(&str, Option<u32>, u64); 4] = [
        ("elected pass, patches every pod", None, n as u64),
        ("listing pass, nothing to change", Some(100), 0),
        ("policy change, patches every pod", Some(50), n as u64),
        ("listing pass, nothing to change", Some(50), 0),
    ];
    for (pass, (what, min_limit, want_patched)) in steps.into_iter().enumerate() {
        let (patched_before, checked_before) = (patched(), checked());
        if let Some(p) = min_limit {
            st.policy.store(Arc::new(policy(p)));
            triggers.send(Trigger::ClusterConfig, Scope::All);
        }
        let took = until_passes(&st, pass as u64 + 1, timeout).await;
        let (rss, hwm) = vm();
        assert_eq!(patched() - patched_before, want_patched, "{what}: patched");
        // The pod watch also counts the pods it plans; the pass checks each pod once.
        assert!(checked() - checked_before >= n as u64, "{what}: checked");
        eprintln!(
            "pass {}: {what}: {:.1} s, VmRSS {:.1} MiB, VmHWM {:.1} MiB",
            pass + 1,
            took.as_secs_f64(),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
        rows.push((rss, hwm));
    }
    running.finish();
    election.finish().await;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let (_, hwm) = rows[3];
    println!(
        "reresolve-rss pods={n} namespaces={namespaces} thp={thp} before_rss_mib={:.1} \
         rss_after_passes_mib={:.1},{:.1},{:.1},{:.1} hwm_mib={:.1}",
        mib(before.0),
        mib(rows[0].0),
        mib(rows[1].0),
        mib(rows[2].0),
        mib(rows[3].0),
        mib(hwm)
    );
    // Flat between passes: the second listing pass ends where the first did.
    assert!(
        rows[3].0 <= rows[1].0 + 4 * 1024,
        "RSS grew between listing passes: {:.1} -> {:.1} MiB",
        mib(rows[1].0),
        mib(rows[3].0)
    );
    // The budget holds for the process as shipped (huge pages off).
    assert!(
        thp || mib(hwm) < 64.0,
        "the holder's peak {:.1} MiB is over 64 MiB with {n} pods",
        mib(hwm)
    );
}
