//! A fake of the apiserver's object endpoints for the self-managed certificates: Secrets in
//! namespaces and MutatingWebhookConfigurations, with list/watch (fieldSelector on the name),
//! get, create and resourceVersion-checked replace, like the real one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::{
    changes, failure, is_watch, json_response, list, newer_than, query, since, watch_response,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::broadcast;

pub const SECRETS: &str = "secrets";
pub const WEBHOOKS: &str = "mutatingwebhookconfigurations";

#[derive(Default)]
struct Inner {
    version: u64,
    /// (resource, name) -> object.
    objects: BTreeMap<(String, String), Value>,
    uids: u64,
}

#[derive(Clone)]
pub struct FakeObjects {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<(String, &'static str, Value)>,
}

impl Default for FakeObjects {
    fn default() -> Self {
        FakeObjects {
            inner: Arc::default(),
            events: broadcast::channel(256).0,
        }
    }
}

impl FakeObjects {
    pub fn get(&self, resource: &str, name: &str) -> Option<Value> {
        let o = self.inner.lock().expect("lock");
        o.objects.get(&(resource.into(), name.into())).cloned()
    }

    /// Stores `obj` as given (a new uid when it has none), with the next resourceVersion.
    pub fn put(&self, resource: &str, mut obj: Value) -> Value {
        let mut o = self.inner.lock().expect("lock");
        o.version += 1;
        let name = obj["metadata"]["name"].as_str().expect("name").to_owned();
        let key = (resource.to_owned(), name);
        let existed = o.objects.contains_key(&key);
        if obj["metadata"]["uid"].is_null() {
            o.uids += 1;
            obj["metadata"]["uid"] = format!("uid-{}", o.uids).into();
        }
        obj["metadata"]["resourceVersion"] = o.version.to_string().into();
        o.objects.insert(key, obj.clone());
        let kind = if existed { "MODIFIED" } else { "ADDED" };
        let _ = self.events.send((resource.to_owned(), kind, obj.clone()));
        obj
    }

    pub fn delete(&self, resource: &str, name: &str) {
        let mut o = self.inner.lock().expect("lock");
        o.version += 1;
        if let Some(obj) = o.objects.remove(&(resource.into(), name.into())) {
            let _ = self.events.send((resource.to_owned(), "DELETED", obj));
        }
    }

    /// Changes a stored object in place (e.g. a user emptying the caBundle).
    pub fn edit(&self, resource: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut obj = self.get(resource, name).expect("object");
        f(&mut obj);
        self.put(resource, obj);
    }

    pub async fn serve(&self) -> (SocketAddr, axum_server::Handle<SocketAddr>) {
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/secrets",
                get(list_secrets).post(create_secret),
            )
            .route(
                "/api/v1/namespaces/{ns}/secrets/{name}",
                get(get_secret).put(replace_secret),
            )
            .route(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                get(list_webhooks),
            )
            .route(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
                get(get_webhook).put(replace_webhook),
            )
            .with_state(self.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
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

    fn list(&self, resource: &'static str, q: Option<String>) -> Response {
        let q = query(q);
        let name = q
            .get("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .map(str::to_owned);
        let matches = move |obj: &Value| {
            name.as_ref()
                .is_none_or(|n| obj["metadata"]["name"].as_str() == Some(n.as_str()))
        };
        // Subscribed under the lock `put` sends under: every change is either in the snapshot
        // or in `rx`, never lost between the two (as the real apiserver's watch cache).
        let (version, items, rx) = {
            let o = self.inner.lock().expect("lock");
            let items: Vec<Value> = o
                .objects
                .iter()
                .filter(|((r, _), obj)| r == resource && matches(obj))
                .map(|(_, v)| v.clone())
                .collect();
            (o.version, items, self.events.subscribe())
        };
        if !is_watch(&q) {
            return list("List", "v1", version, items);
        }
        let since = since(&q);
        let replay: Vec<(String, &'static str, Value)> = items
            .into_iter()
            .filter(|obj| newer_than(obj, since))
            .map(|obj| (resource.to_owned(), "MODIFIED", obj))
            .collect();
        watch_response(futures::stream::iter(replay).chain(changes(rx)).filter_map(
            move |(r, kind, obj)| {
                let keep = r == resource && matches(&obj);
                async move { keep.then_some((kind, obj)) }
            },
        ))
    }

    fn get_one(&self, resource: &str, name: &str) -> Response {
        match self.get(resource, name) {
            Some(obj) => json_response(StatusCode::OK, &obj),
            None => failure(404, "NotFound"),
        }
    }

    fn create(&self, resource: &str, body: &Bytes) -> Response {
        let obj: Value = serde_json::from_slice(body).expect("object");
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        if self.get(resource, name).is_some() {
            return failure(409, "AlreadyExists");
        }
        let stored = self.put(resource, obj);
        json_response(StatusCode::CREATED, &stored)
    }

    /// PUT: only with the stored resourceVersion (409 otherwise); the uid is kept.
    fn replace(&self, resource: &str, name: &str, body: &Bytes) -> Response {
        let mut obj: Value = serde_json::from_slice(body).expect("object");
        let Some(current) = self.get(resource, name) else {
            return failure(404, "NotFound");
        };
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"] {
            return failure(409, "Conflict");
        }
        obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
        let stored = self.put(resource, obj);
        json_response(StatusCode::OK, &stored)
    }
}

async fn list_secrets(
    State(f): State<FakeObjects>,
    Path(_ns): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    f.list(SECRETS, q)
}

async fn create_secret(
    State(f): State<FakeObjects>,
    Path(_ns): Path<String>,
    body: Bytes,
) -> Response {
    f.create(SECRETS, &body)
}

async fn get_secret(
    State(f): State<FakeObjects>,
    Path((_ns, name)): Path<(String, String)>,
) -> Response {
    f.get_one(SECRETS, &name)
}

async fn replace_secret(
    State(f): State<FakeObjects>,
    Path((_ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    f.replace(SECRETS, &name, &body)
}

async fn list_webhooks(State(f): State<FakeObjects>, RawQuery(q): RawQuery) -> Response {
    f.list(WEBHOOKS, q)
}

async fn get_webhook(State(f): State<FakeObjects>, Path(name): Path<String>) -> Response {
    f.get_one(WEBHOOKS, &name)
}

async fn replace_webhook(
    State(f): State<FakeObjects>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    f.replace(WEBHOOKS, &name, &body)
}
