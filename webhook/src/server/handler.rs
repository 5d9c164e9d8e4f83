//! HTTP handlers: `/mutate-pod`, `/healthz`, `/readyz`, `/metrics`.
//!
//! `/mutate-pod` always answers HTTP 200 with an AdmissionReview (docs/contract.md §4): the
//! apiserver treats any other status as a webhook failure, and a response that says why is
//! more useful.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use koord_runtime::logging::LineBudget;
use kube::Api;

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use tracing::{Instrument as _, Span};

use crate::admission::review_names::ReviewNames;
use crate::admission::{
    Decision, OperationLabel, ReviewContext, Reviewed, admission_span, allow_unresolved, review,
};
use crate::live::state::{AppState, NOT_OPTED_IN, has_opt_in_label};
use crate::server::body_budget::{BodyBudget, Held};

fn json(body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

enum ReadError {
    /// Waiting for a slot, then reading the body, took longer than the deadline.
    Deadline {
        had_slot: bool,
    },
    Body(String),
}

/// The body length the request announces (`Content-Length`), if any.
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the body within `limit` bytes: a `Content-Length` above it is refused before a byte
/// is read, and a body that streams past it (chunked, or a lying length) is cut off there, so
/// no request buffers more than the limit. A body that comes in one frame (the apiserver's,
/// and nearly every other) is kept as it came, without a copy; one in several is gathered by
/// [`gather`].
async fn read_body(
    mut body: Body,
    declared: Option<u64>,
    limit: usize,
    held: Held,
) -> Result<Bytes, ReadError> {
    if let Some(length) = declared.filter(|l| *l > limit as u64) {
        return Err(ReadError::Body(format!(
            "request body of {length} bytes is above the {limit}-byte limit"
        )));
    }
    let first = loop {
        match body.frame().await {
            None => return Ok(Bytes::new()),
            Some(frame) => {
                if let Ok(data) = frame.map_err(|e| unreadable(limit, e))?.into_data() {
                    break data;
                }
            }
        }
    };
    if first.len() > limit {
        return Err(unreadable(limit, "length limit exceeded"));
    }
    if body.is_end_stream() {
        return Ok(first);
    }
    // Boxed: rare, and inline it would grow every admission's future.
    Box::pin(gather(body, first, declared, limit, held)).await
}

/// The rest of a body after its `first` frame, gathered into one buffer of the announced size
/// (no growth: a 3 MiB body copied through doublings took the server past 64 MiB), each frame
/// holding its bytes of the connection's budget in `held` first (a frame waits until it fits).
async fn gather(
    mut body: Body,
    first: Bytes,
    declared: Option<u64>,
    limit: usize,
    mut held: Held,
) -> Result<Bytes, ReadError> {
    let capacity = declared.map_or(8 * 1024, |l| l as usize);
    let mut total = first.len();
    let mut first = Some(first);
    let mut gathered = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| unreadable(limit, e))?.into_data() else {
            continue;
        };
        total += data.len();
        if total > limit {
            return Err(unreadable(limit, "length limit exceeded"));
        }
        held.hold(first.as_ref().map_or(0, Bytes::len) + data.len())
            .await;
        if let Some(earlier) = first.take() {
            gathered.reserve(capacity.max(total));
            gathered.extend_from_slice(&earlier);
        }
        gathered.extend_from_slice(&data);
    }
    Ok(first.unwrap_or_else(|| Bytes::from(gathered)))
}

fn unreadable(limit: usize, why: impl std::fmt::Display) -> ReadError {
    ReadError::Body(format!(
        "request body unreadable or above {limit} bytes: {why}"
    ))
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
pub fn mutate_pod(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> impl Future<Output = Response> {
    let start = Instant::now();
    // Only the body and its announced length go into the future: the head (headers, URI,
    // extensions) is dropped here, so the future the runtime moves and stores stays small.
    let declared = declared_length(&req);
    let budget = req.extensions().get::<BodyBudget>().cloned();
    let closing = state.readiness.draining().then(|| Closing::of(&req));
    let body = req.into_body();
    async move {
        let span = admission_span();
        let metrics = &state.metrics;
        let inflight = InFlight::enter(&metrics.inflight);
        let reviewed = admit(&state, body, declared, budget, start, &span)
            .instrument(span.clone())
            .await;
        drop(inflight);
        metrics.count_admission(reviewed.operation, reviewed.qos_class, &reviewed.decision);
        metrics
            .admission_duration
            .observe(start.elapsed().as_secs_f64());
        span.in_scope(|| log(&reviewed));
        let mut resp = json(reviewed.body);
        if let Some(closing) = closing {
            closing.close_after(&mut resp);
        }
        resp
    }
}

/// While the server drains (after SIGTERM), the connection an admission came on is closed
/// once it is answered, so the client's next admission opens a new connection, which the
/// Service sends to a replica that stays.
struct Closing {
    http1: bool,
    connection: Option<axum_server::ConnectionShutdown>,
}

impl Closing {
    fn of(req: &Request) -> Self {
        Closing {
            http1: req.version() <= axum::http::Version::HTTP_11,
            connection: req
                .extensions()
                .get::<axum_server::ConnectionShutdown>()
                .cloned(),
        }
    }

    /// HTTP/1.1: `Connection: close` on this answer, so the client never sends another
    /// request on the connection (closing it after an answer without saying so races with a
    /// client that reuses it, and a POST that loses that race is not retried). HTTP/2: a
    /// graceful GOAWAY; streams already open are answered, new ones go elsewhere.
    fn close_after(self, resp: &mut Response) {
        if self.http1 {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(connection) = self.connection {
            connection.graceful_shutdown();
        }
    }
}

/// Reads the body and takes a permit, then reviews it. The usual admission (a small body that
/// came with its head, a permit free) is reviewed at once, with no timer; anything that has to
/// wait goes through [`admit_waiting`].
async fn admit(
    state: &Arc<AppState>,
    body: Body,
    declared: Option<u64>,
    budget: Option<BodyBudget>,
    start: Instant,
    span: &Span,
) -> Reviewed {
    let limit = state.limits.max_body_bytes;
    // A large (or unannounced) body waits for the large-body lane before it is read, so one
    // client streaming bodies at the limit holds one lane, not every worker (and not the
    // connection's budget, which it may be larger than).
    let large = declared.is_none_or(|l| l > LARGE_BODY_BYTES as u64 && l <= limit as u64);
    let held = Held::of(budget.filter(|_| !large));
    let mut read = std::pin::pin!(read_body(body, declared, limit, held));
    if !large && let Ok(permit) = state.permits.try_acquire() {
        match futures::poll!(read.as_mut()) {
            Poll::Ready(Ok(body)) => {
                let reviewed = review_confirmed(state, body, false, start, span).await;
                drop(permit);
                return reviewed;
            }
            Poll::Ready(Err(e)) => return read_failed(e),
            // The body is still on its way: it waits without holding a permit.
            Poll::Pending => drop(permit),
        }
    }
    // Boxed: the timers and semaphore waits would otherwise make every admission's future
    // (moved and stored on each request) larger for the rare admission that waits.
    Box::pin(admit_waiting(state, read, large, start, span)).await
}

/// Reads the body and takes a permit, both within the deadline (one timer for the two), then
/// reviews it. An admission whose body came with its head (the apiserver's) goes straight to
/// a permit; one still waiting for its body first holds a body-wait slot, of which there are
/// half as many, so stalled clients never hold the permits the others are reviewed under.
async fn admit_waiting(
    state: &Arc<AppState>,
    read: impl Future<Output = Result<Bytes, ReadError>>,
    large: bool,
    start: Instant,
    span: &Span,
) -> Reviewed {
    let had_slot = AtomicBool::new(false);
    let slot_and_body = async {
        let body = async {
            let lane = match large {
                true => state.large_bodies.acquire().await.ok(),
                false => None,
            };
            (lane, read.await)
        };
        let mut body = std::pin::pin!(body);
        // The body came with the head and is read in this poll (no timer), or soon after
        // (over HTTP/2 the stream's handler may start before its DATA frame is processed,
        // later still on a busy connection). It is in memory already.
        let early = match futures::poll!(body.as_mut()) {
            Poll::Ready(read) => Some(read),
            Poll::Pending => tokio::time::timeout(BODY_WITH_HEAD, body.as_mut())
                .await
                .ok(),
        };
        if let Some(read) = early {
            let permit = state.permits.acquire().await.ok();
            return (permit, read);
        }
        let waiting = state.body_waits.acquire().await.ok();
        had_slot.store(true, Ordering::Relaxed);
        let read = body.await;
        drop(waiting);
        let permit = state.permits.acquire().await.ok();
        (permit, read)
    };
    match tokio::time::timeout(state.limits.deadline, slot_and_body).await {
        Ok((Some(_permit), (lane, Ok(body)))) => {
            review_confirmed(state, body, lane.is_some(), start, span).await
        }
        Ok((_, (_, Err(e)))) => read_failed(e),
        // The semaphores are never closed; answer as if no permit came free.
        Ok((None, (_, Ok(_)))) => read_failed(ReadError::Deadline { had_slot: false }),
        Err(_) => read_failed(ReadError::Deadline {
            had_slot: had_slot.load(Ordering::Relaxed),
        }),
    }
}

fn read_failed(e: ReadError) -> Reviewed {
    match e {
        ReadError::Deadline { had_slot: true } => {
            unresolved("request not read before the deadline")
        }
        ReadError::Deadline { had_slot: false } => {
            unresolved("too many concurrent admissions; not resolved before the deadline")
        }
        ReadError::Body(message) => unresolved(&message),
    }
}

/// Reviews with the namespace cache; when the cache says "not opted in", asks the apiserver
/// (the label may be seconds old) and reviews again if it is in fact opted in.
async fn review_confirmed(
    state: &Arc<AppState>,
    body: Bytes,
    in_large_lane: bool,
    start: Instant,
    span: &Span,
) -> Reviewed {
    let reviewed = review_in_lane(state, &body, in_large_lane, true).await;
    reviewed.record_in(span);
    let not_opted_in = matches!(
        reviewed.decision,
        Decision::Unchanged { reason: Some(r) } if r == NOT_OPTED_IN
    );
    let Some(client) = state.kube.get().filter(|_| not_opted_in) else {
        return reviewed;
    };
    // Boxed: the apiserver call's future is kilobytes, and inline it would make every
    // admission's future (moved and stored on each request) that large for a rare path.
    Box::pin(confirm_opt_in(
        state,
        client,
        reviewed,
        &body,
        in_large_lane,
        start,
    ))
    .await
}

/// The namespace cache said "not opted in": asks the apiserver, and reviews again if the
/// namespace is in fact opted in.
async fn confirm_opt_in(
    state: &Arc<AppState>,
    client: &kube::Client,
    reviewed: Reviewed,
    body: &Bytes,
    in_large_lane: bool,
    start: Instant,
) -> Reviewed {
    let budget = state
        .limits
        .deadline
        .saturating_sub(start.elapsed())
        .min(Duration::from_secs(1));
    let api: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(budget, api.get_metadata_opt(reviewed.namespace())).await {
        Ok(Ok(Some(ns))) if has_opt_in_label(ns.metadata.labels.as_ref()) => {
            review_in_lane(state, body, in_large_lane, false).await
        }
        Ok(Ok(_)) => reviewed,
        Ok(Err(e)) => {
            // Once per such request: any client can send them.
            static UNCONFIRMED: LineBudget = LineBudget::new("unconfirmed namespace opt-ins");
            if UNCONFIRMED.allow() {
                tracing::warn!(uid = %reviewed.uid(), namespace = %reviewed.namespace(), error = %e,
                    "could not confirm the namespace opt-in label; trusting the cache");
            }
            reviewed
        }
        Err(_) => reviewed,
    }
}

/// How long a body may take to follow its head and still count as sent with it: far above
/// the scheduling delay of a frame already received, far below any deadline.
const BODY_WITH_HEAD: Duration = Duration::from_millis(50);

/// Bodies above this are read one at a time (the large-body lane) and reviewed on a blocking
/// thread: parsing a body near the size limit takes milliseconds, and on a runtime worker it
/// would hold up every small admission queued behind it (docs/admission-server.md, "Abuse").
const LARGE_BODY_BYTES: usize = 256 * 1024;

/// Reviews `body`: inline on the worker, or, in the large-body lane (whose permit the caller
/// holds), on a blocking thread.
async fn review_in_lane(
    state: &Arc<AppState>,
    body: &Bytes,
    in_large_lane: bool,
    check_namespace_cache: bool,
) -> Reviewed {
    if !in_large_lane || body.len() <= LARGE_BODY_BYTES {
        return review_guarded(state, body, check_namespace_cache);
    }
    let (state, body) = (state.clone(), body.clone());
    tokio::task::spawn_blocking(move || review_guarded(&state, &body, check_namespace_cache))
        .await
        .unwrap_or_else(|_| unresolved("internal error while resolving the pod"))
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
        names: ReviewNames::default(),
        operation: OperationLabel::Other,
        dry_run: false,
        qos_class: None,
        decision: Decision::Error {
            message: message.to_owned(),
        },
        body: allow_unresolved("", &format!("koord-webhook: {message}")),
    }
}

/// Denied admissions written to the log: any client that reaches the port can send reviews
/// that are denied (or fail), as many as it likes; `koord_webhook_admissions_total` counts
/// every one.
static DENIED: LineBudget = LineBudget::new("denied admissions");
/// Failed admissions (limits, malformed reviews) written to the log.
static FAILED: LineBudget = LineBudget::new("failed admissions");

fn log(r: &Reviewed) {
    let qos_class = r.qos_class.map_or("", |c| c.as_str());
    let operation = r.operation.as_str();
    // Allowed admissions log at debug: at thousands per second an info line each would cost
    // more than the admission itself. Denials and errors are rare and visible, within their
    // budgets.
    let within_budget = match &r.decision {
        Decision::Mutated { .. } | Decision::Unchanged { .. } => true,
        Decision::Denied { .. } => !tracing::enabled!(tracing::Level::INFO) || DENIED.allow(),
        Decision::Error { .. } => !tracing::enabled!(tracing::Level::WARN) || FAILED.allow(),
    };
    if !within_budget {
        return;
    }
    match &r.decision {
        Decision::Mutated { ops } => tracing::debug!(
            uid = %r.uid(), namespace = %r.namespace(), pod = %r.pod(), operation, dry_run = r.dry_run,
            qos_class, decision = "mutated", patch_ops = ops, "admission"
        ),
        Decision::Unchanged { reason } => tracing::debug!(
            uid = %r.uid(), namespace = %r.namespace(), pod = %r.pod(), operation, dry_run = r.dry_run,
            qos_class, decision = "unchanged", reason = reason.unwrap_or(""), "admission"
        ),
        Decision::Denied { message } => tracing::info!(
            uid = %r.uid(), namespace = %r.namespace(), pod = %r.pod(), operation, dry_run = r.dry_run,
            decision = "denied", message = %message, "admission"
        ),
        Decision::Error { message } => tracing::warn!(
            uid = %r.uid(), namespace = %r.namespace(), pod = %r.pod(), operation,
            decision = "error", message = %message, "admission"
        ),
    }
}

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.readiness.draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let pending = state.readiness.pending();
    if let (true, Some(problem)) = (pending.is_empty(), state.readiness.certificate_problem()) {
        return (StatusCode::SERVICE_UNAVAILABLE, problem).into_response();
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::state::{Limits, NamespaceGate, Readiness};
    use crate::metrics::Metrics;
    use crate::policy::PolicyConfig;

    /// Every admission's future is moved and stored on each request; the rare paths (the
    /// apiserver call that confirms a namespace label, the timers of an admission that waits)
    /// are boxed so that they do not make it kilobytes (it was 3.4 KB).
    #[test]
    fn the_admission_future_stays_small() {
        fn size_of_future<F: Future>(_: &F) -> usize {
            std::mem::size_of::<F>()
        }
        let state = AppState::new(
            PolicyConfig::default(),
            NamespaceGate {
                exempt: vec![],
                opt_in: None,
            },
            Readiness::all_ready(),
            Metrics::new().expect("metrics"),
            Limits {
                max_body_bytes: 1024,
                max_concurrent: 4,
                deadline: Duration::from_secs(1),
            },
        );
        let admission = mutate_pod(State(state), Request::new(Body::empty()));
        let size = size_of_future(&admission);
        assert!(size <= 1024, "the /mutate-pod future is {size} bytes");
    }
}
