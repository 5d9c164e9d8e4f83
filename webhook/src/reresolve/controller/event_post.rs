//! Posts `MemoryQOSReresolved` Events (`events.k8s.io/v1`, shown by `kubectl describe pod`):
//! identical ones within the window are dropped ([`EventDedup`], as the applier does) and the
//! rest leave at the re-resolver's rate from a bounded queue, so a pass that changes thousands
//! of pods never waits for its Events and cannot flood the API server with them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use koord_runtime::EventDedup;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::metrics::reresolve::{EventResult, ReresolveMetrics};
use crate::reresolve::message::REASON_RERESOLVED;
use crate::reresolve::rate::TokenBucket;
use crate::reresolve::stored_pod::PodRef;

pub const REPORTING_CONTROLLER: &str = "koordinator.sh/koord-webhook";
const ACTION: &str = "Reresolve";
/// Events waiting to be posted; more are dropped (and counted).
const QUEUE: usize = 1024;

/// One Event to post about a pod.
#[derive(Debug, Clone)]
pub struct PodNote {
    pub pod: PodRef,
    pub message: String,
}

/// The sending side: never blocks a pass.
#[derive(Clone)]
pub struct EventQueue {
    tx: mpsc::Sender<PodNote>,
    metrics: ReresolveMetrics,
}

impl EventQueue {
    pub fn post(&self, note: PodNote) {
        if self.tx.try_send(note).is_err() {
            self.metrics.event(EventResult::Dropped);
        }
    }
}

/// The `events.k8s.io/v1` object for a note, reported by `instance` (the Lease identity).
pub fn to_k8s_event(note: &PodNote, instance: &str, now: Timestamp) -> Event {
    let pod = &note.pod;
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())),
            namespace: Some(pod.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(ACTION.to_owned()),
        reason: Some(REASON_RERESOLVED.to_owned()),
        note: Some(note.message.clone()),
        type_: Some("Normal".to_owned()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
            ..Default::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Default::default()
    }
}

/// The queue and the task that drains it (runs until every [`EventQueue`] is dropped).
pub fn spawn(
    client: kube::Client,
    instance: String,
    window: Duration,
    qps: f64,
    burst: u32,
    metrics: ReresolveMetrics,
) -> (EventQueue, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<PodNote>(QUEUE);
    let queue = EventQueue {
        tx,
        metrics: metrics.clone(),
    };
    let task = async move {
        let mut dedup = EventDedup::new(window);
        let mut bucket = TokenBucket::new(qps, burst, Instant::now());
        while let Some(note) = rx.recv().await {
            let now = Instant::now();
            dedup.expire(now);
            if !dedup.admit(&note.pod.uid, REASON_RERESOLVED, &note.message, now) {
                metrics.event(EventResult::Suppressed);
                continue;
            }
            tokio::time::sleep(bucket.take(now)).await;
            let api: Api<Event> = Api::namespaced(client.clone(), &note.pod.namespace);
            let event = to_k8s_event(&note, &instance, Timestamp::now());
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => metrics.event(EventResult::Posted),
                Err(e) => {
                    metrics.event(EventResult::Error);
                    tracing::warn!(pod = %note.pod.name, namespace = %note.pod.namespace,
                        error = %e, "posting the MemoryQOSReresolved event failed");
                }
            }
        }
    };
    let span = tracing::info_span!("reresolve-events");
    (queue, tokio::spawn(task.instrument(span)))
}
