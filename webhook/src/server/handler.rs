//! HTTP handlers: `/mutate-pod`, `/healthz`, `/readyz`, `/metrics`.
//!
//! `/mutate-pod` always answers HTTP 200 with an AdmissionReview (docs/contract.md §4): the
//! apiserver treats any other status as a webhook failure, and a response that says why is
//! more useful.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use tracing::{Instrument as _, Span};

use super::admission::{
    Decision, OperationLabel, ReviewContext, Reviewed, admission_span, allow_unresolved, review,
};
use super::state::{AppState, NOT_OPTED_IN, has_opt_in_label};

fn json(body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

enum ReadError {
    Deadline,
    Body(String),
}

async fn read_body(state: &AppState, req: Request) -> Result<Bytes, ReadError> {
    let limit = state.limits.max_body_bytes;
    tokio::time::timeout(state.limits.deadline, async {
        axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|e| {
                ReadError::Body(format!(
                    "request body unreadable or above {limit} bytes: {e}"
                ))
            })
    })
    .await
    .map_err(|_| ReadError::Deadline)?
}

/// Keeps `koord_webhook_inflight_admissions` right even when the client goes away and the
/// handler future is dropped mid-request.
struct InFlight<'m>(&'m prometheus::IntGauge);

impl<'m> InFlight<'m> {
    fn enter(gauge: &'m prometheus::IntGauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `/mutate-pod`. The whole admission runs in an [`admission_span`] (debug level), so the
/// lines of the namespace confirmation and of the kube client say which admission they belong
/// to.
pub async fn mutate_pod(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let start = Instant::now();
    let span = admission_span();
    let metrics = &state.metrics;
    let inflight = InFlight::enter(&metrics.inflight);
    let reviewed = admit(&state, req, start, &span)
        .instrument(span.clone())
        .await;
    drop(inflight);
    metrics.count_admission(reviewed.operation, reviewed.qos_class, &reviewed.decision);
    metrics
        .admission_duration
        .observe(start.elapsed().as_secs_f64());
    span.in_scope(|| log(&reviewed));
    json(reviewed.body)
}

/// Waits for a slot, reads the body and reviews it, within the deadline.
async fn admit(state: &AppState, req: Request, start: Instant, span: &Span) -> Reviewed {
    // The bound keeps memory flat under a burst: each permit holds at most one body.
    let permit = tokio::time::timeout(state.limits.deadline, state.permits.acquire()).await;
    match permit {
        Ok(Ok(_permit)) => match read_body(state, req).await {
            Ok(body) => review_confirmed(state, &body, start, span).await,
            Err(ReadError::Deadline) => unresolved("request not read before the deadline"),
            Err(ReadError::Body(message)) => unresolved(&message),
        },
        _ => unresolved("too many concurrent admissions; not resolved before the deadline"),
    }
}

/// Reviews with the namespace cache; when the cache says "not opted in", asks the apiserver
/// (the label may be seconds old) and reviews again if it is in fact opted in.
async fn review_confirmed(state: &AppState, body: &[u8], start: Instant, span: &Span) -> Reviewed {
    let reviewed = review_guarded(state, body, true);
    reviewed.record_in(span);
    let not_opted_in = matches!(
        reviewed.decision,
        Decision::Unchanged { reason: Some(r) } if r == NOT_OPTED_IN
    );
    let Some(client) = state.kube.get().filter(|_| not_opted_in) else {
        return reviewed;
    };
    let budget = state
        .limits
        .deadline
        .saturating_sub(start.elapsed())
        .min(Duration::from_secs(1));
    let api: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(budget, api.get_metadata_opt(&reviewed.namespace)).await {
        Ok(Ok(Some(ns))) if has_opt_in_label(ns.metadata.labels.as_ref()) => {
            review_guarded(state, body, false)
        }
        Ok(Ok(_)) => reviewed,
        Ok(Err(e)) => {
            tracing::warn!(uid = %reviewed.uid, namespace = %reviewed.namespace, error = %e,
                "could not confirm the namespace opt-in label; trusting the cache");
            reviewed
        }
        Err(_) => reviewed,
    }
}

/// The engine must not panic (fuzzed), but if it ever does the apiserver still gets an
/// answer instead of a reset connection.
fn review_guarded(state: &AppState, body: &[u8], check_namespace_cache: bool) -> Reviewed {
    let policy = state.policy.load();
    let skip = |ns: &str| state.namespaces.skip_reason(ns, check_namespace_cache);
    let ctx = ReviewContext {
        config: &policy,
        skip_namespace: &skip,
    };
    std::panic::catch_unwind(AssertUnwindSafe(|| review(body, &ctx)))
        .unwrap_or_else(|_| unresolved("internal error while resolving the pod"))
}

/// Allowed without a patch (as `failurePolicy: Ignore` would), counted as an error.
fn unresolved(message: &str) -> Reviewed {
    Reviewed {
        uid: String::new(),
        operation: OperationLabel::Other,
        namespace: String::new(),
        pod: String::new(),
        dry_run: false,
        qos_class: None,
        decision: Decision::Error {
            message: message.to_owned(),
        },
        body: allow_unresolved("", &format!("koord-webhook: {message}")),
    }
}

fn log(r: &Reviewed) {
    let qos_class = r.qos_class.map_or("", |c| c.as_str());
    let operation = r.operation.as_str();
    // Allowed admissions log at debug: at thousands per second an info line each would cost
    // more than the admission itself. Denials and errors are rare and always visible.
    match &r.decision {
        Decision::Mutated { ops } => tracing::debug!(
            uid = %r.uid, namespace = %r.namespace, pod = %r.pod, operation, dry_run = r.dry_run,
            qos_class, decision = "mutated", patch_ops = ops, "admission"
        ),
        Decision::Unchanged { reason } => tracing::debug!(
            uid = %r.uid, namespace = %r.namespace, pod = %r.pod, operation, dry_run = r.dry_run,
            qos_class, decision = "unchanged", reason = reason.unwrap_or(""), "admission"
        ),
        Decision::Denied { message } => tracing::info!(
            uid = %r.uid, namespace = %r.namespace, pod = %r.pod, operation, dry_run = r.dry_run,
            decision = "denied", message = %message, "admission"
        ),
        Decision::Error { message } => tracing::warn!(
            uid = %r.uid, namespace = %r.namespace, pod = %r.pod, operation,
            decision = "error", message = %message, "admission"
        ),
    }
}

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let pending = state.readiness.pending();
    if pending.is_empty() {
        "ready".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches to sync: {}", pending.join(", ")),
        )
            .into_response()
    }
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut resp = Response::new(Body::from(state.metrics.render()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}
