//! The Lease elector against an in-process fake of the Lease API (resourceVersion-checked
//! updates, like the real one), two electors each behind its own "connection" to one store:
//! one holder at a time; a holder cut off from the API server stops acting at its renew
//! deadline, before the other takes over after the lease duration; a released Lease is taken
//! at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fake_apiserver::{failure, json_response};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use koord_webhook::reresolve::lease::LeaseTiming;
use koord_webhook::server::reresolver::metrics::ReresolveMetrics;
use koord_webhook::server::reresolver::{Leadership, LeaseConfig, elector};
use serde_json::Value;
use tokio::sync::Notify;

/// The one Lease store both fake connections share.
#[derive(Default)]
struct Store {
    version: u64,
    lease: Option<Value>,
    writes: u64,
}

/// One client's way to the store; `cut` makes every request fail as if the network were down.
#[derive(Clone)]
struct Conn {
    store: Arc<Mutex<Store>>,
    cut: Arc<AtomicBool>,
}

async fn get_lease(State(c): State<Conn>, Path((_ns, _name)): Path<(String, String)>) -> Response {
    if c.cut.load(Ordering::SeqCst) {
        return failure(503, "ServiceUnavailable");
    }
    match &c.store.lock().expect("lock").lease {
        Some(l) => json_response(StatusCode::OK, &l.clone()),
        None => failure(404, "NotFound"),
    }
}

/// PUT: only with the stored resourceVersion (409 otherwise), as the API server does.
async fn put_lease(
    State(c): State<Conn>,
    Path((_ns, _name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if c.cut.load(Ordering::SeqCst) {
        return failure(503, "ServiceUnavailable");
    }
    let mut new: Value = serde_json::from_slice(&body).expect("lease");
    let mut s = c.store.lock().expect("lock");
    let current = s
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if current != Some(new["metadata"]["resourceVersion"].clone()) {
        return failure(409, "Conflict");
    }
    s.version += 1;
    s.writes += 1;
    new["metadata"]["resourceVersion"] = s.version.to_string().into();
    s.lease = Some(new.clone());
    json_response(StatusCode::OK, &new)
}

async fn post_lease(State(c): State<Conn>, Path(_ns): Path<String>, body: Bytes) -> Response {
    if c.cut.load(Ordering::SeqCst) {
        return failure(503, "ServiceUnavailable");
    }
    let mut new: Value = serde_json::from_slice(&body).expect("lease");
    let mut s = c.store.lock().expect("lock");
    if s.lease.is_some() {
        return failure(409, "AlreadyExists");
    }
    s.version += 1;
    s.writes += 1;
    new["metadata"]["resourceVersion"] = s.version.to_string().into();
    s.lease = Some(new.clone());
    json_response(StatusCode::CREATED, &new)
}

async fn serve(conn: Conn) -> SocketAddr {
    let app = Router::new()
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
            get(get_lease).put(put_lease),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            axum::routing::post(post_lease),
        )
        .with_state(conn);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn client(addr: SocketAddr) -> kube::Client {
    let uri: http::Uri = format!("http://{addr}").parse().expect("uri");
    kube::Client::try_from(kube::Config::new(uri)).expect("client")
}

fn timing() -> LeaseTiming {
    LeaseTiming::new(
        Duration::from_secs(2),
        Duration::from_millis(1500),
        Duration::from_millis(200),
    )
    .expect("timing")
}

struct Candidate {
    leadership: Arc<Leadership>,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

async fn candidate(identity: &str, addr: SocketAddr) -> Candidate {
    let leadership = Leadership::new(identity.to_owned(), timing());
    let stop = Arc::new(Notify::new());
    let metrics = ReresolveMetrics::new(&prometheus::Registry::new()).expect("metrics");
    let config = LeaseConfig {
        name: "koord-webhook-reresolver".into(),
        namespace: "koordinator-system".into(),
        identity: identity.to_owned(),
        timing: timing(),
    };
    let task = tokio::spawn(elector::run(
        client(addr),
        config,
        leadership.clone(),
        metrics,
        stop.clone(),
    ));
    Candidate {
        leadership,
        stop,
        task,
    }
}

/// Samples both until `done` holds (or `timeout`), failing if both ever act at once.
async fn watch_until(
    a: &Candidate,
    b: &Candidate,
    timeout: Duration,
    done: impl Fn(bool, bool) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let (la, lb) = (a.leadership.is_leader(), b.leadership.is_leader());
        assert!(!(la && lb), "both act at {:?}", start.elapsed());
        if done(la, lb) {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "timed out: a={la} b={lb}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn holder(store: &Mutex<Store>) -> Option<String> {
    store.lock().expect("lock").lease.as_ref()?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_a_cut_off_holder_steps_down_before_the_other_takes_over() {
    koord_runtime::install_crypto_provider();
    let store = Arc::new(Mutex::new(Store::default()));
    let conn_a = Conn {
        store: store.clone(),
        cut: Arc::default(),
    };
    let conn_b = Conn {
        store: store.clone(),
        cut: Arc::default(),
    };
    let a = candidate("a", serve(conn_a.clone()).await).await;
    let first = Instant::now();
    while !a.leadership.is_leader() {
        assert!(first.elapsed() < Duration::from_secs(3), "a never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = candidate("b", serve(conn_b).await).await;
    // Both running: only a, for a while (a renews; b waits).
    watch_until(&a, &b, Duration::from_secs(5), |_, _| elapsed(first, 3)).await;
    assert!(a.leadership.is_leader() && !b.leadership.is_leader());
    assert_eq!(holder(&store).as_deref(), Some("a"));

    // Cut a off: it must stop acting at its renew deadline, b may take over only later.
    conn_a.cut.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    watch_until(&a, &b, Duration::from_secs(3), |la, _| !la).await;
    let stepped_down = cut.elapsed();
    assert!(
        stepped_down <= Duration::from_millis(1500 + 300),
        "a acted {stepped_down:?} after losing the API server"
    );
    watch_until(&a, &b, Duration::from_secs(6), |_, lb| lb).await;
    let taken = cut.elapsed();
    assert!(
        taken >= Duration::from_millis(1500),
        "b took over {taken:?} after the cut"
    );
    assert_eq!(holder(&store).as_deref(), Some("b"));

    // a is back: b keeps the Lease.
    conn_a.cut.store(false, Ordering::SeqCst);
    let back = Instant::now();
    watch_until(&a, &b, Duration::from_secs(3), |_, _| elapsed(back, 1)).await;
    assert!(b.leadership.is_leader() && !a.leadership.is_leader());

    // b hands the Lease back on shutdown: a takes it at its next look, not after the duration.
    b.stop.notify_one();
    b.task.await.expect("b ends");
    let released = Instant::now();
    while !a.leadership.is_leader() {
        assert!(
            released.elapsed() < Duration::from_secs(1),
            "a did not take a released Lease at once"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!b.leadership.is_leader());
    let lease = store.lock().expect("lock").lease.clone().expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);
    assert!(
        lease["spec"]["leaseTransitions"].as_i64() >= Some(1),
        "{lease}"
    );
    a.stop.notify_one();
    a.task.await.expect("a ends");
    assert!(holder(&store).is_none(), "a released it too");
}

/// True once `secs` have passed since `since` (sampling for a while).
fn elapsed(since: Instant, secs: u64) -> bool {
    since.elapsed() >= Duration::from_secs(secs)
}
