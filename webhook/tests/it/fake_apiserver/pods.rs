//! A fake of what the re-resolver talks to: pods (list in pages, watch, get, JSON patch with
//! the resourceVersion precondition the real API server enforces), one Lease
//! ([`super::lease`]) and Events (accepted and counted). No admission runs: a
//! patch is stored as sent. `resize` plays the API server and the kubelet of an in-place
//! resize: the spec first, then (unless pending) the status the kubelet reports.
//!
//! Pods are stored as their JSON text, so tens of thousands of them cost their bytes (the
//! memory tests run it in a process of its own with 50,000 pods).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::lease::FakeLease;
use super::{changes, failure, is_watch, json_response, query, since};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Default)]
struct Objects {
    version: u64,
    pods: BTreeMap<(String, String), Bytes>,
    patches: u64,
    events: Vec<Value>,
    /// Only counted: the memory tests post tens of thousands.
    events_posted: u64,
    keep_events: bool,
    requests: Requests,
}

/// Requests served, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Requests {
    pub list_pages: u64,
    pub watches: u64,
    pub gets: u64,
    pub patches: u64,
    pub events: u64,
}

#[derive(Clone)]
pub struct FakePods {
    objects: Arc<Mutex<Objects>>,
    changes: broadcast::Sender<(&'static str, Bytes)>,
    lease: FakeLease,
}

impl Default for FakePods {
    fn default() -> Self {
        Self::new()
    }
}

impl FakePods {
    pub fn new() -> Self {
        let fake = FakePods {
            objects: Arc::default(),
            changes: broadcast::channel(1024).0,
            lease: FakeLease::default(),
        };
        fake.objects.lock().expect("lock").keep_events = true;
        fake
    }

    /// Events are counted, not kept (for tens of thousands of them).
    #[allow(dead_code)] // the attack binary's memory test
    pub fn count_events_only(&self) {
        self.objects.lock().expect("lock").keep_events = false;
    }

    /// Stores a pod (new resourceVersion) and tells the watchers.
    pub fn put(&self, mut pod: Value) {
        let mut o = self.objects.lock().expect("lock");
        o.version += 1;
        pod["metadata"]["resourceVersion"] = o.version.to_string().into();
        let key = key_of(&pod);
        let kind = if o.pods.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let text = Bytes::from(serde_json::to_vec(&pod).expect("json"));
        o.pods.insert(key, text.clone());
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send((kind, text));
        }
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        let text = self.pod_text(namespace, name)?;
        Some(serde_json::from_slice(&text).expect("stored pod"))
    }

    fn pod_text(&self, namespace: &str, name: &str) -> Option<Bytes> {
        self.objects
            .lock()
            .expect("lock")
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    #[allow(dead_code)] // the attack binary's memory test
    pub fn pod_count(&self) -> usize {
        self.objects.lock().expect("lock").pods.len()
    }

    /// Changes a stored pod with `f` (a new version, watchers told).
    pub fn update(&self, namespace: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut pod = self.pod(namespace, name).expect("pod exists");
        f(&mut pod);
        self.put(pod);
    }

    pub fn patches(&self) -> u64 {
        self.objects.lock().expect("lock").patches
    }

    pub fn events(&self) -> Vec<Value> {
        self.objects.lock().expect("lock").events.clone()
    }

    #[allow(dead_code)] // the attack binary's memory test
    pub fn events_posted(&self) -> u64 {
        self.objects.lock().expect("lock").events_posted
    }

    #[allow(dead_code)] // the attack binary's memory test
    pub fn requests(&self) -> Requests {
        self.objects.lock().expect("lock").requests
    }

    pub async fn serve(&self) -> SocketAddr {
        self.serve_on("127.0.0.1:0").await
    }

    pub async fn serve_on(&self, addr: &str) -> SocketAddr {
        let app = Router::new()
            .route("/api/v1/pods", get(all_pods))
            .route("/api/v1/namespaces/{ns}/pods", get(namespace_pods))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(one_pod).patch(patch_pod),
            )
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events",
                post(post_event),
            )
            .with_state(self.clone())
            .merge(self.lease.router());
        super::serve_router_on(app, addr).await
    }
}

fn key_of(pod: &Value) -> (String, String) {
    let s = |k: &str| pod["metadata"][k].as_str().unwrap_or_default().to_owned();
    (s("namespace"), s("name"))
}

/// A list, `limit` items a page; the continue token is the offset of the next item (the
/// real one is opaque too).
fn pod_list(o: &mut Objects, namespace: Option<&str>, q: &BTreeMap<String, String>) -> Response {
    o.requests.list_pages += 1;
    let offset: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut matching = o
        .pods
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .skip(offset);
    let mut body = Vec::new();
    let mut taken = 0;
    body.extend_from_slice(b"{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"items\":[");
    for (_, text) in matching.by_ref().take(limit) {
        if taken > 0 {
            body.push(b',');
        }
        body.extend_from_slice(text);
        taken += 1;
    }
    let more = matching.next().is_some();
    let token = if more {
        (offset + taken).to_string()
    } else {
        String::new()
    };
    let meta = json!({"resourceVersion": o.version.to_string(), "continue": token});
    body.extend_from_slice(format!("],\"metadata\":{meta}}}").as_bytes());
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("response")
}

async fn all_pods(State(fake): State<FakePods>, RawQuery(q): RawQuery) -> Response {
    let q = query(q);
    if !is_watch(&q) {
        return pod_list(&mut fake.objects.lock().expect("lock"), None, &q);
    }
    let since = since(&q);
    let rx = fake.changes.subscribe();
    let replay: Vec<(&'static str, Bytes)> = {
        let mut o = fake.objects.lock().expect("lock");
        o.requests.watches += 1;
        o.pods
            .values()
            .filter(|text| resource_version(text) > since)
            .map(|text| ("MODIFIED", text.clone()))
            .collect()
    };
    let live = changes(rx);
    let stream = futures::stream::iter(replay)
        .chain(live)
        .map(|(kind, text)| {
            let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
            line.extend_from_slice(&text);
            line.extend_from_slice(b"}\n");
            Ok::<_, Infallible>(Bytes::from(line))
        });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .expect("response")
}

/// The `resourceVersion` of a stored pod's text.
fn resource_version(text: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Stored {
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: String,
    }
    serde_json::from_slice::<Stored>(text)
        .ok()
        .and_then(|p| p.metadata.resource_version.parse().ok())
        .unwrap_or(0)
}

async fn namespace_pods(
    State(fake): State<FakePods>,
    Path(ns): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    pod_list(
        &mut fake.objects.lock().expect("lock"),
        Some(&ns),
        &query(q),
    )
}

async fn one_pod(
    State(fake): State<FakePods>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    fake.objects.lock().expect("lock").requests.gets += 1;
    match fake.pod_text(&ns, &name) {
        Some(text) => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(text))
            .expect("response"),
        None => failure(404, "NotFound"),
    }
}

/// RFC 6902 patch; a `replace` of `/metadata/resourceVersion` with another version than the
/// stored one is a 409, as on the real API server.
async fn patch_pod(
    State(fake): State<FakePods>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(mut pod) = fake.pod(&ns, &name) else {
        return failure(404, "NotFound");
    };
    let stored_version = pod["metadata"]["resourceVersion"].clone();
    let Ok(patch) = serde_json::from_slice::<json_patch::Patch>(&body) else {
        return failure(400, "BadRequest");
    };
    if json_patch::patch(&mut pod, &patch).is_err() {
        return failure(422, "Invalid");
    }
    if pod["metadata"]["resourceVersion"] != stored_version {
        return failure(409, "Conflict");
    }
    {
        let mut o = fake.objects.lock().expect("lock");
        o.patches += 1;
        o.requests.patches += 1;
    }
    fake.put(pod);
    let stored = fake.pod_text(&ns, &name).expect("stored");
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(stored))
        .expect("response")
}

async fn post_event(State(fake): State<FakePods>, body: Bytes) -> Response {
    let event: Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut o = fake.objects.lock().expect("lock");
    o.events_posted += 1;
    o.requests.events += 1;
    if o.keep_events {
        o.events.push(event.clone());
    }
    json_response(StatusCode::CREATED, &event)
}
