//! The Lease elector against an in-process fake of the Lease API (resourceVersion-checked
//! updates, like the real one), two electors each behind its own "connection" to one store:
//! one holder at a time; a holder cut off from the API server stops acting at its renew
//! deadline, before the other takes over after the lease duration; a released Lease is taken
//! at once, also by a candidate that was cut off for seconds (its client's retries do not hold
//! its next look).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fake_apiserver::client;
use crate::fake_apiserver::lease::FakeLease;
use koord_webhook::reresolve::controller::metrics::ReresolveMetrics;
use koord_webhook::reresolve::controller::{Leadership, LeaseConfig, elector};
use koord_webhook::reresolve::lease::LeaseTiming;
use tokio::sync::Notify;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_a_cut_off_holder_steps_down_before_the_other_takes_over() {
    koord_runtime::install_crypto_provider();
    let conn_a = FakeLease::default();
    let conn_b = conn_a.connection();
    let a = candidate("a", conn_a.serve().await).await;
    let first = Instant::now();
    while !a.leadership.is_leader() {
        assert!(first.elapsed() < Duration::from_secs(3), "a never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = candidate("b", conn_b.serve().await).await;
    // Both running: only a, for a while (a renews; b waits).
    watch_until(&a, &b, Duration::from_secs(5), |_, _| elapsed(first, 3)).await;
    assert!(a.leadership.is_leader() && !b.leadership.is_leader());
    assert_eq!(conn_a.holder().as_deref(), Some("a"));

    // Cut a off: it must stop acting at its renew deadline, b may take over only later.
    conn_a.cut(true);
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
    assert_eq!(conn_a.holder().as_deref(), Some("b"));
    // a stays cut off a while longer: kube's client retries each 503 with a backoff that has
    // grown to seconds by now, and a's looks must not wait it out once the API server is back.
    let longer = Instant::now();
    watch_until(&a, &b, Duration::from_secs(6), |_, _| elapsed(longer, 4)).await;

    // a is back: b keeps the Lease.
    conn_a.cut(false);
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
    let lease = conn_a.lease().expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);
    assert!(
        lease["spec"]["leaseTransitions"].as_i64() >= Some(1),
        "{lease}"
    );
    a.stop.notify_one();
    a.task.await.expect("a ends");
    assert!(conn_a.holder().is_none(), "a released it too");
}

/// True once `secs` have passed since `since` (sampling for a while).
fn elapsed(since: Instant, secs: u64) -> bool {
    since.elapsed() >= Duration::from_secs(secs)
}
