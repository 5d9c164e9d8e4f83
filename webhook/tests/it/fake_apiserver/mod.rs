//! Tiny in-process fakes of kube-apiserver: here the list/watch endpoints for ConfigMaps (in
//! one namespace) and Namespaces (metadata-only), enough for kube's reflectors; [`objects`]
//! (Secrets, webhook configurations), [`pods`] (the re-resolver's pods and Events) and
//! [`lease`] (one Lease) beside it. The helpers every fake shares (query parsing, the watch
//! stream, Status failures, a client) are at the bottom of this file.

pub mod lease;
pub mod objects;
pub mod pods;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

#[derive(Default)]
struct Objects {
    version: u64,
    configmaps: BTreeMap<String, Value>,
    namespaces: BTreeMap<String, Value>,
}

#[derive(Clone)]
pub struct FakeApiServer {
    objects: Arc<Mutex<Objects>>,
    events: broadcast::Sender<(String, Value)>,
    /// Lists wait until this is true: lets a test observe "not synced yet".
    open: watch::Sender<bool>,
    pub config_namespace: String,
}

fn configmap(name: &str, ns: &str, rv: u64, data: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                        "uid": format!("uid-{name}")},
           "data": data})
}

fn namespace_meta(name: &str, rv: u64, labels: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": name, "resourceVersion": rv.to_string(), "labels": labels,
                        "uid": format!("uid-ns-{name}")}})
}

impl FakeApiServer {
    pub fn new(config_namespace: &str) -> Self {
        let (events, _) = broadcast::channel(64);
        FakeApiServer {
            objects: Arc::default(),
            events,
            open: watch::channel(true).0,
            config_namespace: config_namespace.to_owned(),
        }
    }

    pub fn hold_lists(&self) {
        self.open.send_replace(false);
    }

    pub fn release_lists(&self) {
        self.open.send_replace(true);
    }

    /// Creates or updates a ConfigMap; watchers get a MODIFIED event.
    pub fn put_configmap(&self, name: &str, data: &[(&str, &str)]) {
        let data: BTreeMap<String, String> = data
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let mut o = self.objects.lock().expect("lock");
        o.version += 1;
        let obj = configmap(name, &self.config_namespace, o.version, &data);
        o.configmaps.insert(name.into(), obj.clone());
        let _ = self.events.send(("configmaps".into(), obj));
    }

    /// Changes a Namespace without telling the watchers (a watch that lags behind).
    pub fn put_namespace_quietly(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let mut o = self.objects.lock().expect("lock");
        o.version += 1;
        let obj = namespace_meta(name, o.version, &labels);
        o.namespaces.insert(name.into(), obj);
    }

    pub fn put_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let mut o = self.objects.lock().expect("lock");
        o.version += 1;
        let obj = namespace_meta(name, o.version, &labels);
        o.namespaces.insert(name.into(), obj.clone());
        let _ = self.events.send(("namespaces".into(), obj));
    }

    /// Serves on `addr` (port 0 for any) until the returned handle is shut down.
    pub async fn serve(&self, addr: SocketAddr) -> (SocketAddr, axum_server::Handle<SocketAddr>) {
        let app = Router::new()
            .route("/api/v1/namespaces/{ns}/configmaps", get(configmaps))
            .route("/api/v1/namespaces", get(namespaces))
            .route("/api/v1/namespaces/{name}", get(namespace))
            .with_state(self.clone());
        let listener = std::net::TcpListener::bind(addr).expect("bind fake apiserver");
        listener.set_nonblocking(true).expect("nonblocking");
        let local = listener.local_addr().expect("addr");
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp(listener)
            .expect("from_tcp")
            .handle(handle.clone());
        tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
        (local, handle)
    }

    async fn wait_open(&self) {
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }

    /// Like the real apiserver, a watch from resourceVersion N first replays what changed
    /// after N (here: the current objects newer than N), then streams live changes.
    fn watch(&self, resource: &'static str, name: Option<String>, since: u64) -> Response {
        let rx = self.events.subscribe();
        let replay: Vec<(String, Value)> = {
            let o = self.objects.lock().expect("lock");
            let map = if resource == "configmaps" {
                &o.configmaps
            } else {
                &o.namespaces
            };
            map.values()
                .filter(|obj| newer_than(obj, since))
                .map(|obj| (resource.to_owned(), obj.clone()))
                .collect()
        };
        watch_response(futures::stream::iter(replay).chain(changes(rx)).filter_map(
            move |(kind, obj)| {
                let keep = kind == resource
                    && name
                        .as_ref()
                        .is_none_or(|n| obj["metadata"]["name"].as_str() == Some(n.as_str()));
                async move { keep.then_some(("MODIFIED", obj)) }
            },
        ))
    }
}

/// Query parameters; kube only percent-encodes `=` and `,` in the selectors we use.
pub fn query(raw: Option<String>) -> BTreeMap<String, String> {
    raw.unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace("%3D", "=").replace("%2C", ",")))
        .collect()
}

/// The `resourceVersion` a list or watch starts from (0 when absent).
pub fn since(q: &BTreeMap<String, String>) -> u64 {
    q.get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether the query asks for a watch.
pub fn is_watch(q: &BTreeMap<String, String>) -> bool {
    q.get("watch").is_some_and(|w| w == "true" || w == "1")
}

/// Whether `obj` changed after resourceVersion `since` (what a watch from `since` replays).
pub fn newer_than(obj: &Value, since: u64) -> bool {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|v| v > since)
}

/// The live changes of a fake, skipping what a slow watcher missed (as a real watch would
/// have to relist for).
pub fn changes<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(item) => return Some((item, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// A watch answer: one `{"type": ..., "object": ...}` line per event, as long as the stream.
pub fn watch_response(
    events: impl futures::Stream<Item = (&'static str, Value)> + Send + 'static,
) -> Response {
    let lines = events.map(|(kind, obj)| {
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).expect("json");
        line.push(b'\n');
        Ok::<_, Infallible>(Bytes::from(line))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(lines))
        .expect("response")
}

/// Serves `router` on a loopback port for the rest of the test.
pub async fn serve_router(router: Router) -> SocketAddr {
    serve_router_on(router, "127.0.0.1:0").await
}

/// Serves `router` on `addr` for the rest of the test.
pub async fn serve_router_on(router: Router, addr: &str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

/// The API server's `Status` failure object for `code` and `reason` (404 NotFound, 409 Conflict...).
pub fn failure(code: u16, reason: &str) -> Response {
    json_response(
        StatusCode::from_u16(code).expect("code"),
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                "code": code, "message": reason}),
    )
}

/// A list answer at resourceVersion `version`.
pub fn list(kind: &str, api_version: &str, version: u64, items: Vec<Value>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"resourceVersion": version.to_string()}, "items": items}),
    )
}

async fn configmaps(
    State(fake): State<FakeApiServer>,
    Path(ns): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let q = query(q);
    let name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .map(str::to_owned);
    if is_watch(&q) {
        return fake.watch("configmaps", name, since(&q));
    }
    fake.wait_open().await;
    let o = fake.objects.lock().expect("lock");
    let items = o
        .configmaps
        .values()
        .filter(|_| ns == fake.config_namespace)
        .filter(|cm| {
            name.as_ref()
                .is_none_or(|n| cm["metadata"]["name"] == n.as_str())
        })
        .cloned()
        .collect();
    list("ConfigMapList", "v1", o.version, items)
}

async fn namespaces(State(fake): State<FakeApiServer>, RawQuery(q): RawQuery) -> Response {
    let q = query(q);
    if is_watch(&q) {
        return fake.watch("namespaces", None, since(&q));
    }
    fake.wait_open().await;
    let o = fake.objects.lock().expect("lock");
    let items = o.namespaces.values().cloned().collect();
    list(
        "PartialObjectMetadataList",
        "meta.k8s.io/v1",
        o.version,
        items,
    )
}

async fn namespace(State(fake): State<FakeApiServer>, Path(name): Path<String>) -> Response {
    let o = fake.objects.lock().expect("lock");
    match o.namespaces.get(&name) {
        Some(ns) => json_response(StatusCode::OK, ns),
        None => failure(404, "NotFound"),
    }
}

/// A kube client talking plain HTTP to the fake.
pub fn client(addr: SocketAddr) -> kube::Client {
    let uri: http::Uri = format!("http://{addr}").parse().expect("uri");
    let mut config = kube::Config::new(uri);
    config.default_namespace = "default".into();
    kube::Client::try_from(config).expect("kube client")
}

/// The admission state a re-resolver under test resolves with: `min_limit_percent` for LS
/// memory QoS (enabled), no namespace gate, everything ready.
pub fn reresolver_state(min_limit_percent: u32) -> Arc<koord_webhook::live::state::AppState> {
    use koord_webhook::live::state::{AppState, Limits, NamespaceGate, Readiness};
    use koord_webhook::policy::{ClusterQosConfig, PolicyConfig};
    let cluster = ClusterQosConfig::parse(&format!(
        r#"{{"clusterStrategy": {{"lsClass": {{"memoryQOS": {{"enable": true, "minLimitPercent": {min_limit_percent}}}}}}}}}"#
    ))
    .expect("cluster")
    .config;
    AppState::new(
        PolicyConfig {
            cluster,
            ..PolicyConfig::default()
        },
        NamespaceGate {
            exempt: Vec::new(),
            opt_in: None,
        },
        Readiness::all_ready(),
        koord_webhook::metrics::Metrics::new().expect("metrics"),
        Limits {
            max_body_bytes: 1 << 20,
            max_concurrent: 4,
            deadline: std::time::Duration::from_secs(5),
        },
    )
}
