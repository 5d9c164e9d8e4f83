//! Posts [`PodEvent`]s to the API server (`events.k8s.io/v1`, shown by `kubectl describe pod`),
//! after [`EventDedup`] (identical Events once per window) and a global rate cap.
//!
//! kube-runtime's `Recorder` is not used: it keys its series on the reason without the note,
//! so a changed `MemoryQOSApplied` would be recorded as a repeat of the old text.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use koord_runtime::EventDedup;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use koord_translator::pod::event::{EventKind, PodEvent};

use crate::metrics::Metrics;

pub const REPORTING_CONTROLLER: &str = "koordinator.sh/koord-applier";
const ACTION: &str = "ApplyCgroups";
/// At most this many Events per [`RATE_WINDOW`] leave the node; more wait their turn.
const RATE_CAP: usize = 50;
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Messages to the publisher task.
#[derive(Debug)]
pub enum SinkMsg {
    Event(PodEvent),
    /// The pod was deleted: forget what was posted for it.
    Forget(String),
}

/// The `events.k8s.io/v1` object for `ev`.
pub fn to_k8s_event(ev: &PodEvent, node: &str) -> Event {
    let now = Timestamp::now();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", ev.name, now.as_nanosecond())),
            namespace: Some(ev.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(ACTION.to_owned()),
        reason: Some(ev.reason.to_owned()),
        note: Some(ev.message.clone()),
        type_: Some(
            match ev.kind {
                EventKind::Normal => "Normal",
                EventKind::Warning => "Warning",
            }
            .to_owned(),
        ),
        regarding: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(ev.name.clone()),
            namespace: Some(ev.namespace.clone()),
            uid: Some(ev.uid.clone()),
            ..Default::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(format!("{REPORTING_CONTROLLER}-{node}")),
        ..Default::default()
    }
}

/// Runs until the channel closes.
pub async fn publish(
    client: kube::Client,
    node: String,
    mut rx: mpsc::Receiver<SinkMsg>,
    window: Duration,
    metrics: Arc<Metrics>,
) {
    let mut agg = EventDedup::new(window);
    let mut sent: std::collections::VecDeque<Instant> = Default::default();
    while let Some(msg) = rx.recv().await {
        let ev = match msg {
            SinkMsg::Forget(uid) => {
                agg.forget(&uid);
                continue;
            }
            SinkMsg::Event(ev) => ev,
        };
        let now = Instant::now();
        agg.expire(now);
        if !agg.admit(&ev.uid, ev.reason, &ev.message, now) {
            metrics
                .events
                .with_label_values(&[ev.reason, "suppressed"])
                .inc();
            continue;
        }
        while sent
            .front()
            .is_some_and(|t| now.duration_since(*t) > RATE_WINDOW)
        {
            sent.pop_front();
        }
        if sent.len() >= RATE_CAP {
            // Over the cap: wait for the oldest to leave the window instead of dropping (a
            // node start posts one Event per pod). The bounded queue in front of this task
            // (`try_send`) is what sheds load if posting falls far behind.
            metrics
                .events
                .with_label_values(&[ev.reason, "delayed"])
                .inc();
            if let Some(oldest) = sent.pop_front() {
                tokio::time::sleep_until((oldest + RATE_WINDOW).into()).await;
            }
        }
        sent.push_back(Instant::now());
        let api: Api<Event> = Api::namespaced(client.clone(), &ev.namespace);
        match api
            .create(&PostParams::default(), &to_k8s_event(&ev, &node))
            .await
        {
            Ok(_) => metrics
                .events
                .with_label_values(&[ev.reason, "posted"])
                .inc(),
            Err(e) => {
                metrics
                    .events
                    .with_label_values(&[ev.reason, "error"])
                    .inc();
                tracing::warn!(pod = %ev.name, namespace = %ev.namespace, reason = ev.reason, error = %e, "posting event failed");
            }
        }
    }
}
