//! One AdmissionReview in, the response bytes out (pure: no IO, no clock, no globals).
//!
//! The request is read with a lean borrowed view (uid, kind, operation, namespace, dryRun, the
//! pod as a [`PodInput`], the stored pod's annotations); `userInfo` and everything else the
//! engine does not read are skipped by serde without allocating. Only when that fast parse fails is the body read a
//! second time, more leniently, to find the uid and say precisely what is wrong.

pub mod response;
pub mod review_names;

use koord_api::QosClass;
use serde::Deserialize;
use serde_json::value::RawValue;

use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use tracing::field::Empty;

use self::response::{PatchFirst, ResponseStatus, write_body_after_patch, write_response};
use self::review_names::ReviewNames;
use crate::pod_patch::{patch_pod_into, previous_resolved};
use crate::policy::PolicyConfig;
use crate::resolve::pod_input::{StrMap, Text};
use crate::resolve::{Operation, PodInput};

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_KIND: &str = "AdmissionReview";

/// The AdmissionReview envelope. `R` is how the request is read: [`RequestIn`] first, and
/// [`LenientRequestIn`] only when that failed.
#[derive(Deserialize)]
struct ReviewIn<'a, R> {
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<Text<'a>>,
    request: Option<R>,
}

#[derive(Deserialize)]
struct RequestIn<'a> {
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<KindIn<'a>>,
    #[serde(borrow, default, rename = "subResource")]
    sub_resource: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Text<'a>>,
    #[serde(borrow, default)]
    operation: Option<Text<'a>>,
    #[serde(default, rename = "dryRun")]
    dry_run: Option<bool>,
    #[serde(borrow, default)]
    object: Option<PodInput<'a>>,
    /// On UPDATE, only the stored pod's annotations are read: its resolved-qos is this
    /// webhook's own last write, while the incoming one may be a hand edit.
    #[serde(borrow, default, rename = "oldObject")]
    old_object: Option<OldObjectIn<'a>>,
}

#[derive(Deserialize)]
struct OldObjectIn<'a> {
    #[serde(borrow, default)]
    metadata: Option<OldMetaIn<'a>>,
}

#[derive(Deserialize)]
struct OldMetaIn<'a> {
    #[serde(borrow, default)]
    annotations: Option<StrMap<'a>>,
}

impl OldObjectIn<'_> {
    fn resolved_qos(&self) -> Option<&str> {
        self.metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get(ANNOTATION_RESOLVED_QOS)
            .map(|v| v.as_str())
    }
}

/// The request with only what an error answer needs and the object left unparsed: read only
/// when [`RequestIn`] failed, to find the uid and say precisely what is wrong.
#[derive(Deserialize)]
struct LenientRequestIn<'a> {
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<KindIn<'a>>,
    #[serde(borrow, default)]
    operation: Option<Text<'a>>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct KindIn<'a> {
    #[serde(borrow, default)]
    group: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<Text<'a>>,
}

impl KindIn<'_> {
    fn is_pod(&self) -> bool {
        self.group.as_deref().unwrap_or("").is_empty() && self.kind.as_deref() == Some("Pod")
    }
}

/// The admission operation, as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationLabel {
    Create,
    Update,
    /// DELETE, CONNECT, or unreadable.
    Other,
}

impl OperationLabel {
    pub const ALL: [OperationLabel; 3] = [Self::Create, Self::Update, Self::Other];

    fn parse(text: Option<&str>) -> Self {
        match text {
            Some("CREATE") => Self::Create,
            Some("UPDATE") => Self::Update,
            _ => Self::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Other => "other",
        }
    }
}

/// What the webhook decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed with a patch of `ops` operations.
    Mutated { ops: usize },
    /// Allowed without a patch; `reason` says why when nothing was resolved at all.
    Unchanged { reason: Option<&'static str> },
    /// Denied: a pod annotation is malformed or out of range.
    Denied { message: String },
    /// The request was not a readable AdmissionReview for a pod.
    Error { message: String },
}

impl Decision {
    pub fn outcome(&self) -> &'static str {
        match self {
            Decision::Mutated { .. } => "mutated",
            Decision::Unchanged { .. } => "unchanged",
            Decision::Denied { .. } => "denied",
            Decision::Error { .. } => "error",
        }
    }
}

/// One answered review: the response body plus what logs and metrics need.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// The request's uid, namespace and pod name (see [`Reviewed::uid`] and the others).
    pub names: ReviewNames,
    pub operation: OperationLabel,
    pub dry_run: bool,
    pub qos_class: Option<QosClass>,
    pub decision: Decision,
    /// The AdmissionReview response, JSON.
    pub body: Vec<u8>,
}

impl Reviewed {
    pub fn uid(&self) -> &str {
        self.names.uid()
    }

    /// The request's namespace, else the pod's.
    pub fn namespace(&self) -> &str {
        self.names.namespace()
    }

    /// The request's name, else the pod's display name.
    pub fn pod(&self) -> &str {
        self.names.pod()
    }

    /// Fills the fields of an [`admission_span`] once the body has been read.
    pub fn record_in(&self, span: &tracing::Span) {
        if span.is_disabled() {
            return;
        }
        span.record("uid", self.uid());
        span.record("namespace", self.namespace());
        span.record("pod", self.pod());
        span.record("operation", self.operation.as_str());
    }
}

/// The span of one admission: `uid`, `namespace`, `pod`, `operation`, recorded by
/// [`Reviewed::record_in`] once the body has been read. It is a debug span: at the default
/// `info` level it is disabled and costs a branch, no allocation and no formatting (the
/// admission log line itself carries the same fields; benches/admission.rs measures both).
pub fn admission_span() -> tracing::Span {
    tracing::debug_span!(
        "admission",
        uid = Empty,
        namespace = Empty,
        pod = Empty,
        operation = Empty
    )
}

/// What a review needs besides the body.
pub struct ReviewContext<'c> {
    pub config: &'c PolicyConfig,
    /// `Some(reason)` when pods of that namespace must never be mutated (kube-system, our
    /// own namespace, a namespace known not to have opted in).
    pub skip_namespace: &'c dyn Fn(&str) -> Option<&'static str>,
}

/// Answers one AdmissionReview body. Never panics on any input (fuzzed).
pub fn review(body: &[u8], ctx: &ReviewContext<'_>) -> Reviewed {
    // Valid UTF-8 (every body the apiserver sends): parse it as a `str`, which spares
    // serde_json a UTF-8 check of every string it reads. The bytes parse to the same view;
    // anything else takes the byte path, whose errors the answers quote.
    let parsed = match simdutf8::basic::from_utf8(body) {
        Ok(text) => serde_json::from_str::<ReviewIn<'_, RequestIn<'_>>>(text),
        Err(_) => serde_json::from_slice::<ReviewIn<'_, RequestIn<'_>>>(body),
    };
    match parsed {
        Ok(review) => review_parsed(review, ctx),
        Err(e) => review_unreadable(body, &e),
    }
}

fn check_envelope(api_version: Option<&str>, kind: Option<&str>) -> Result<(), String> {
    if kind != Some(ADMISSION_KIND) {
        return Err(format!(
            "not an AdmissionReview: kind is {:?}, expected {ADMISSION_KIND:?}",
            kind.unwrap_or("")
        ));
    }
    if api_version != Some(ADMISSION_API_VERSION) {
        return Err(format!(
            "unsupported AdmissionReview apiVersion {:?}: only {ADMISSION_API_VERSION} is served (set admissionReviewVersions: [v1])",
            api_version.unwrap_or("")
        ));
    }
    Ok(())
}

fn review_parsed(review: ReviewIn<'_, RequestIn<'_>>, ctx: &ReviewContext<'_>) -> Reviewed {
    let envelope = check_envelope(review.api_version.as_deref(), review.kind.as_deref());
    let Some(request) = review.request else {
        let message = envelope
            .err()
            .unwrap_or_else(|| "not an AdmissionReview request: no request".into());
        return error_reviewed("", OperationLabel::Other, message);
    };
    let uid = request.uid.as_deref().unwrap_or("");
    let operation = OperationLabel::parse(request.operation.as_deref());
    if let Err(message) = envelope {
        return error_reviewed(uid, operation, message);
    }
    if uid.is_empty() {
        return error_reviewed(uid, operation, "request.uid is missing".into());
    }
    let mut out = Reviewed {
        names: ReviewNames::new(uid, request.namespace(), &request.pod_name()),
        operation,
        dry_run: request.dry_run.unwrap_or(false),
        qos_class: None,
        decision: Decision::Unchanged { reason: None },
        body: Vec::new(),
    };
    if let Some(reason) = request.skip_reason(operation, ctx) {
        out.decision = Decision::Unchanged {
            reason: Some(reason),
        };
        out.body = write_response(uid, true, None, None);
        return out;
    }
    let Some(pod) = request.object.as_ref() else {
        out.decision = Decision::Error {
            message: "request.object is missing".into(),
        };
        out.body = write_response(
            uid,
            false,
            None,
            Some(ResponseStatus::bad_request("request.object is missing")),
        );
        return out;
    };
    resolve_and_answer(&mut out, pod, &request, ctx);
    out
}

impl RequestIn<'_> {
    /// The request's namespace, else the pod's.
    fn namespace(&self) -> &str {
        self.namespace
            .as_deref()
            .or_else(|| self.object.as_ref()?.metadata.namespace.as_deref())
            .unwrap_or("")
    }

    /// The request's name, else the pod's display name, in parts (see
    /// [`PodInput::display_name`]).
    fn pod_name(&self) -> [&str; 2] {
        match (&self.object, &self.name) {
            (_, Some(n)) if !n.is_empty() => [n.as_str(), ""],
            (Some(pod), _) => pod.display_name_parts(),
            _ => ["", ""],
        }
    }

    /// Why this request is allowed untouched: not a pod, a subresource, neither CREATE nor
    /// UPDATE, or a namespace that must not be mutated.
    fn skip_reason(
        &self,
        operation: OperationLabel,
        ctx: &ReviewContext<'_>,
    ) -> Option<&'static str> {
        if !self.kind.as_ref().is_some_and(KindIn::is_pod) {
            Some("not a Pod")
        } else if self.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            Some("a pod subresource")
        } else if operation == OperationLabel::Other {
            Some("neither CREATE nor UPDATE")
        } else {
            (ctx.skip_namespace)(self.namespace())
        }
    }

    /// The stored pod's resolved-qos (UPDATE only).
    fn stored_resolved(&self) -> Option<&str> {
        self.old_object.as_ref().and_then(OldObjectIn::resolved_qos)
    }
}

/// Resolves the pod and writes the answer: a patch, no patch, or a denial naming the field.
fn resolve_and_answer(
    out: &mut Reviewed,
    pod: &PodInput<'_>,
    request: &RequestIn<'_>,
    ctx: &ReviewContext<'_>,
) {
    let operation = if out.operation == OperationLabel::Update {
        Operation::Update
    } else {
        Operation::Create
    };
    let previous = previous_resolved(
        operation,
        request.stored_resolved(),
        pod.annotation(ANNOTATION_RESOLVED_QOS),
    );
    // The patch goes into the buffer the response is then written into: one allocation.
    let mut buffer = PatchFirst::new();
    let answer = patch_pod_into(
        pod,
        out.namespace(),
        operation,
        ctx.config,
        previous,
        buffer.buffer(),
    );
    match answer {
        Ok((resolution, ops)) => {
            out.qos_class = Some(resolution.resolved.qos_class);
            if ops > 0 {
                buffer.patch_written();
                out.decision = Decision::Mutated { ops };
            }
            // A BE pod that kept its cpu/memory (colocation off) is told why.
            out.body = write_body_after_patch(buffer, out.uid(), resolution.warning());
        }
        Err(e) => {
            let message = format!("pod {}: {e}", out.pod());
            out.body = write_response(
                out.uid(),
                false,
                None,
                Some(ResponseStatus::invalid(&message)),
            );
            out.decision = Decision::Denied { message };
        }
    }
}

/// The fast parse failed: find out as much as possible for a useful answer.
fn review_unreadable(body: &[u8], first_error: &serde_json::Error) -> Reviewed {
    let Ok(review) = serde_json::from_slice::<ReviewIn<'_, LenientRequestIn<'_>>>(body) else {
        return error_reviewed(
            "",
            OperationLabel::Other,
            format!("not an AdmissionReview: {first_error}"),
        );
    };
    let Some(request) = review.request else {
        let message = check_envelope(review.api_version.as_deref(), review.kind.as_deref())
            .err()
            .unwrap_or_else(|| format!("not an AdmissionReview: {first_error}"));
        return error_reviewed("", OperationLabel::Other, message);
    };
    let uid = request.uid.as_deref().unwrap_or("");
    let operation = OperationLabel::parse(request.operation.as_deref());
    if let Err(message) = check_envelope(review.api_version.as_deref(), review.kind.as_deref()) {
        return error_reviewed(uid, operation, message);
    }
    let is_pod = request.kind.as_ref().is_some_and(KindIn::is_pod);
    if !is_pod && !uid.is_empty() {
        // Not ours to read (the object of another kind does not fit the Pod view): allow.
        return Reviewed {
            names: ReviewNames::uid_only(uid),
            operation,
            dry_run: false,
            qos_class: None,
            decision: Decision::Unchanged {
                reason: Some("not a Pod"),
            },
            body: write_response(uid, true, None, None),
        };
    }
    let message = match request.object {
        Some(object) => match serde_json::from_str::<PodInput<'_>>(object.get()) {
            Err(e) => format!("request.object is not a valid Pod: {e}"),
            Ok(_) => format!("malformed AdmissionReview request: {first_error}"),
        },
        None => format!("malformed AdmissionReview request: {first_error}"),
    };
    error_reviewed(uid, operation, message)
}

fn error_reviewed(uid: &str, operation: OperationLabel, message: String) -> Reviewed {
    Reviewed {
        names: ReviewNames::uid_only(uid),
        operation,
        dry_run: false,
        qos_class: None,
        body: write_response(
            uid,
            false,
            None,
            Some(ResponseStatus::bad_request(&message)),
        ),
        decision: Decision::Error { message },
    }
}

/// The answer when the request could not be reviewed in time or the engine failed: allowed
/// without a patch, as `failurePolicy: Ignore` would have it, with a warning saying why.
pub fn allow_unresolved(uid: &str, warning: &str) -> Vec<u8> {
    response::write_response_with_warning(uid, warning)
}
