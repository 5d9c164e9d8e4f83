//! One Lease (`coordination.k8s.io/v1`) behind the API server's rules: get, create (409
//! AlreadyExists when there is one) and update only with the stored resourceVersion (409
//! Conflict otherwise). Each [`FakeLease::connection`] reaches the same Lease through its own
//! server, and can be cut off from it like a replica that lost the API server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{failure, json_response};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::Value;

#[derive(Default)]
struct Stored {
    version: u64,
    lease: Option<Value>,
}

#[derive(Clone, Default)]
pub struct FakeLease {
    stored: Arc<Mutex<Stored>>,
    /// This connection's requests fail with 503 while set.
    cut: Arc<AtomicBool>,
}

impl FakeLease {
    /// Another way to the same Lease, with its own cut-off switch.
    pub fn connection(&self) -> FakeLease {
        FakeLease {
            stored: self.stored.clone(),
            cut: Arc::default(),
        }
    }

    /// Cuts this connection off from the API server (`true`) or restores it.
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// The stored Lease, if any.
    pub fn lease(&self) -> Option<Value> {
        self.stored.lock().expect("lock").lease.clone()
    }

    /// `spec.holderIdentity` of the stored Lease.
    pub fn holder(&self) -> Option<String> {
        self.lease()?["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_owned)
    }

    /// The Lease routes, to serve alone or beside other fakes.
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(put_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(post_lease),
            )
            .with_state(self.clone())
    }

    /// Serves this connection on a loopback port.
    pub async fn serve(&self) -> SocketAddr {
        super::serve_router(self.router()).await
    }

    /// The stored Lease, or `None` while this connection is cut off (answer 503).
    fn reachable(&self) -> Option<std::sync::MutexGuard<'_, Stored>> {
        (!self.cut.load(Ordering::SeqCst)).then(|| self.stored.lock().expect("lock"))
    }
}

fn cut_off() -> Response {
    failure(503, "ServiceUnavailable")
}

/// Stores `new` as the Lease with the next resourceVersion.
fn store(s: &mut Stored, mut new: Value, status: StatusCode) -> Response {
    s.version += 1;
    new["metadata"]["resourceVersion"] = s.version.to_string().into();
    s.lease = Some(new.clone());
    json_response(status, &new)
}

async fn get_lease(State(fake): State<FakeLease>) -> Response {
    let Some(s) = fake.reachable() else {
        return cut_off();
    };
    match &s.lease {
        Some(l) => json_response(StatusCode::OK, l),
        None => failure(404, "NotFound"),
    }
}

/// PUT: only with the stored resourceVersion (409 otherwise), as the API server does.
async fn put_lease(State(fake): State<FakeLease>, body: Bytes) -> Response {
    let new: Value = serde_json::from_slice(&body).expect("lease");
    let Some(mut s) = fake.reachable() else {
        return cut_off();
    };
    let current = s
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if current != Some(new["metadata"]["resourceVersion"].clone()) {
        return failure(409, "Conflict");
    }
    store(&mut s, new, StatusCode::OK)
}

async fn post_lease(State(fake): State<FakeLease>, body: Bytes) -> Response {
    let new: Value = serde_json::from_slice(&body).expect("lease");
    let Some(mut s) = fake.reachable() else {
        return cut_off();
    };
    if s.lease.is_some() {
        return failure(409, "AlreadyExists");
    }
    store(&mut s, new, StatusCode::CREATED)
}
