//! The one fake API server of the applier's integration tests: a `kube::Client` whose requests a
//! task answers in process (tower-test's mock pair), the way kube-apiserver would for the calls
//! the applier makes. What it serves is set at the start ([`Serves`]); every request is reported
//! on [`FakeApi::requests`] (method, URI, content type, JSON body), so a test waits for the one
//! it cares about and checks the rest.
//!
//! Routes: the pod list (`/api/v1/pods?...`, the pods until [`FakeApi::delete_pods`], then
//! none, with a new resourceVersion); watches (`watch=true`): the first pod watch answers
//! DELETED for each pod when told, every other watch stays open and silent; Event posts (201,
//! the body echoed); the ConfigMap list of `kube-system`; the Node (GET) and its status
//! (PATCH: answered with the Node). Anything else: 404, reported like the rest.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// What the fake serves.
#[derive(Default)]
pub struct Serves {
    pub pods: Vec<Value>,
    /// `kube-system`'s ConfigMaps (a `ConfigMapList`); `None`: 404.
    pub configmaps: Option<Value>,
    /// The Node, by its `metadata.name`; `None`: 404.
    pub node: Option<Value>,
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: String,
    pub content_type: String,
    /// The body, when it was JSON.
    pub body: Option<Value>,
    /// The fake answered 404.
    pub unknown: bool,
}

pub struct FakeApi {
    pub client: kube::Client,
    pub requests: mpsc::UnboundedReceiver<Seen>,
    delete: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApi {
    pub fn start(serves: Serves) -> Self {
        let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(svc, "default");
        let (seen_tx, requests) = mpsc::unbounded_channel();
        let (delete, delete_rx) = oneshot::channel();
        let task = tokio::spawn(serve(handle, serves, seen_tx, delete_rx));
        Self {
            client,
            requests,
            delete: Some(delete),
            task,
        }
    }

    /// The pods are deleted: the first pod watch says so, later lists hold none.
    pub fn delete_pods(&mut self) {
        if let Some(tx) = self.delete.take() {
            let _ = tx.send(());
        }
    }

    /// The next request `pick` accepts (the others are passed over), within `within`.
    pub async fn wait_for<T>(
        &mut self,
        within: Duration,
        mut pick: impl FnMut(&Seen) -> Option<T>,
    ) -> Option<T> {
        tokio::time::timeout(within, async {
            loop {
                let seen = self.requests.recv().await?;
                if let Some(t) = pick(&seen) {
                    return Some(t);
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// The requests seen and not yet taken.
    pub fn drain(&mut self) -> Vec<Seen> {
        std::iter::from_fn(|| self.requests.try_recv().ok()).collect()
    }

    /// The body of the next Event posted, within `within`.
    pub async fn next_event(&mut self, within: Duration) -> Option<Value> {
        self.wait_for(within, |s| {
            (s.method == Method::POST && s.uri.contains("/events"))
                .then(|| s.body.clone())
                .flatten()
        })
        .await
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn json(status: StatusCode, v: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(v).expect("json")))
        .expect("response")
}

async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    serves: Serves,
    seen: mpsc::UnboundedSender<Seen>,
    mut delete_rx: oneshot::Receiver<()>,
) {
    let mut deleted = false;
    let mut first_pod_watch = None;
    // Watches held open for the test's length (dropping one would end it).
    let mut held = Vec::new();
    let node_name = serves
        .node
        .as_ref()
        .and_then(|n| n["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    loop {
        tokio::select! {
            req = handle.next_request() => {
                let Some((req, send)) = req else { break };
                let (method, uri) = (req.method().clone(), req.uri().to_string());
                let content_type = req.headers().get("content-type")
                    .and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let body = serde_json::from_slice::<Value>(&bytes).ok();
                let mut unknown = false;
                if uri.contains("watch=true") {
                    if uri.starts_with("/api/v1/pods") && first_pod_watch.is_none() && !deleted {
                        first_pod_watch = Some(send);
                    } else {
                        held.push(send);
                    }
                } else if method == Method::POST && uri.contains("/events") {
                    send.send_response(Response::builder().status(StatusCode::CREATED)
                        .body(Body::from(bytes.to_vec())).expect("response"));
                } else if uri.starts_with("/api/v1/pods") {
                    let items = if deleted { vec![] } else { serves.pods.clone() };
                    let list = serde_json::json!({"apiVersion": "v1", "kind": "PodList",
                        "metadata": {"resourceVersion": if deleted {"102"} else {"100"}},
                        "items": items});
                    send.send_response(json(StatusCode::OK, &list));
                } else if let (Some(cms), true) = (&serves.configmaps,
                    uri.starts_with("/api/v1/namespaces/kube-system/configmaps?")) {
                    send.send_response(json(StatusCode::OK, cms));
                } else if let (Some(node), true) = (&serves.node, !node_name.is_empty()
                    && (uri == format!("/api/v1/nodes/{node_name}")
                        || uri.starts_with(&format!("/api/v1/nodes/{node_name}/status")))) {
                    send.send_response(json(StatusCode::OK, node));
                } else {
                    unknown = true;
                    send.send_response(Response::builder().status(StatusCode::NOT_FOUND)
                        .body(Body::empty()).expect("response"));
                }
                let _ = seen.send(Seen { method, uri, content_type, body, unknown });
            }
            _ = &mut delete_rx, if !deleted => {
                deleted = true;
                let mut lines = String::new();
                for pod in &serves.pods {
                    let mut gone = pod.clone();
                    gone["metadata"]["resourceVersion"] = "101".into();
                    lines += &(serde_json::json!({"type": "DELETED", "object": gone}).to_string() + "\n");
                }
                if let Some(send) = first_pod_watch.take() {
                    send.send_response(Response::builder().body(Body::from(lines.into_bytes()))
                        .expect("response"));
                }
            }
        }
    }
}
