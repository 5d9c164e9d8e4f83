//! A fake of what the re-resolver talks to: pods (list, watch, get, JSON patch with the
//! resourceVersion precondition the real API server enforces), one Lease (get, create,
//! resourceVersion-checked update) and Events (accepted and counted). No admission runs: a
//! patch is stored as sent. `resize` plays the API server and the kubelet of an in-place
//! resize: the spec first, then (unless pending) the status the kubelet reports.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::{failure, json_response};
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
    pods: BTreeMap<(String, String), Value>,
    lease: Option<Value>,
    patches: u64,
    events: Vec<Value>,
}

#[derive(Clone)]
pub struct FakePods {
    objects: Arc<Mutex<Objects>>,
    changes: broadcast::Sender<(&'static str, Value)>,
}

impl Default for FakePods {
    fn default() -> Self {
        Self::new()
    }
}

impl FakePods {
    pub fn new() -> Self {
        FakePods {
            objects: Arc::default(),
            changes: broadcast::channel(1024).0,
        }
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
        o.pods.insert(key, pod.clone());
        let _ = self.changes.send((kind, pod));
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .expect("lock")
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
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

    pub async fn serve(&self) -> SocketAddr {
        let app = Router::new()
            .route("/api/v1/pods", get(all_pods))
            .route("/api/v1/namespaces/{ns}/pods", get(namespace_pods))
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(one_pod).patch(patch_pod),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(put_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(post_lease),
            )
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events",
                post(post_event),
            )
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }
}

fn key_of(pod: &Value) -> (String, String) {
    let s = |k: &str| pod["metadata"][k].as_str().unwrap_or_default().to_owned();
    (s("namespace"), s("name"))
}

fn query(raw: Option<String>) -> BTreeMap<String, String> {
    raw.unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn pod_list(o: &Objects, namespace: Option<&str>) -> Response {
    let items: Vec<Value> = o
        .pods
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .map(|(_, p)| p.clone())
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"apiVersion": "v1", "kind": "PodList",
                "metadata": {"resourceVersion": o.version.to_string()}, "items": items}),
    )
}

async fn all_pods(State(fake): State<FakePods>, RawQuery(q): RawQuery) -> Response {
    let q = query(q);
    if !q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return pod_list(&fake.objects.lock().expect("lock"), None);
    }
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rx = fake.changes.subscribe();
    let replay: Vec<(&'static str, Value)> = fake
        .objects
        .lock()
        .expect("lock")
        .pods
        .values()
        .filter(|p| {
            p["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|v| v > since)
        })
        .map(|p| ("MODIFIED", p.clone()))
        .collect();
    let live = futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(item) => return Some((item, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let stream = futures::stream::iter(replay)
        .chain(live)
        .map(|(kind, obj)| {
            let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).expect("json");
            line.push(b'\n');
            Ok::<_, Infallible>(Bytes::from(line))
        });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .expect("response")
}

async fn namespace_pods(State(fake): State<FakePods>, Path(ns): Path<String>) -> Response {
    pod_list(&fake.objects.lock().expect("lock"), Some(&ns))
}

async fn one_pod(
    State(fake): State<FakePods>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match fake.pod(&ns, &name) {
        Some(p) => json_response(StatusCode::OK, &p),
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
    fake.objects.lock().expect("lock").patches += 1;
    fake.put(pod);
    json_response(StatusCode::OK, &fake.pod(&ns, &name).expect("stored"))
}

async fn get_lease(State(fake): State<FakePods>) -> Response {
    match &fake.objects.lock().expect("lock").lease {
        Some(l) => json_response(StatusCode::OK, l),
        None => failure(404, "NotFound"),
    }
}

async fn put_lease(State(fake): State<FakePods>, body: Bytes) -> Response {
    let mut new: Value = serde_json::from_slice(&body).expect("lease");
    let mut o = fake.objects.lock().expect("lock");
    let current = o
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if current != Some(new["metadata"]["resourceVersion"].clone()) {
        return failure(409, "Conflict");
    }
    o.version += 1;
    new["metadata"]["resourceVersion"] = o.version.to_string().into();
    o.lease = Some(new.clone());
    json_response(StatusCode::OK, &new)
}

async fn post_lease(State(fake): State<FakePods>, body: Bytes) -> Response {
    let mut new: Value = serde_json::from_slice(&body).expect("lease");
    let mut o = fake.objects.lock().expect("lock");
    if o.lease.is_some() {
        return failure(409, "AlreadyExists");
    }
    o.version += 1;
    new["metadata"]["resourceVersion"] = o.version.to_string().into();
    o.lease = Some(new.clone());
    json_response(StatusCode::CREATED, &new)
}

async fn post_event(State(fake): State<FakePods>, body: Bytes) -> Response {
    let event: Value = serde_json::from_slice(&body).unwrap_or_default();
    fake.objects
        .lock()
        .expect("lock")
        .events
        .push(event.clone());
    json_response(StatusCode::CREATED, &event)
}
