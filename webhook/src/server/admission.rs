//! One AdmissionReview in, the response bytes out (pure: no IO, no clock, no globals).
//!
//! The request is read with a lean borrowed view (uid, kind, operation, namespace, dryRun, the
//! pod as a [`PodView`], the stored pod's annotations); `userInfo` and everything else the engine does not read
//! are skipped by serde without allocating. Only when that fast parse fails is the body read a
//! second time, more leniently, to find the uid and say precisely what is wrong.

use koord_api::QosClass;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::{ResponseStatus, write_response};
use crate::mutation::json_patch;
use crate::policy::PolicyConfig;
use crate::resolve::pod_view::StrMap;
use crate::resolve::pod_view::Text;
use crate::resolve::{Operation, PodView, ResolveContext, resolve_pod_with_previous};
use koord_api::keys::ANNOTATION_RESOLVED_QOS;

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_KIND: &str = "AdmissionReview";

#[derive(Deserialize)]
struct ReviewIn<'a> {
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    request: Option<RequestIn<'a>>,
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
    object: Option<PodView<'a>>,
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

/// The same request with the object left unparsed: read only when [`RequestIn`] failed.
#[derive(Deserialize)]
struct LenientReviewIn<'a> {
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    request: Option<LenientRequestIn<'a>>,
}

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
    pub uid: String,
    pub operation: OperationLabel,
    pub namespace: String,
    pub pod: String,
    pub dry_run: bool,
    pub qos_class: Option<QosClass>,
    pub decision: Decision,
    /// The AdmissionReview response, JSON.
    pub body: Vec<u8>,
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
    match serde_json::from_slice::<ReviewIn<'_>>(body) {
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

fn review_parsed(review: ReviewIn<'_>, ctx: &ReviewContext<'_>) -> Reviewed {
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
    let object = request.object;
    let namespace = request
        .namespace
        .as_deref()
        .or_else(|| object.as_ref()?.metadata.namespace.as_deref())
        .unwrap_or("");
    let mut out = Reviewed {
        uid: uid.to_owned(),
        operation,
        namespace: namespace.to_owned(),
        pod: match (&object, &request.name) {
            (_, Some(n)) if !n.is_empty() => n.to_string(),
            (Some(pod), _) => pod.display_name(),
            _ => String::new(),
        },
        dry_run: request.dry_run.unwrap_or(false),
        qos_class: None,
        decision: Decision::Unchanged { reason: None },
        body: Vec::new(),
    };

    let skip = if !request.kind.as_ref().is_some_and(KindIn::is_pod) {
        Some("not a Pod")
    } else if request
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        Some("a pod subresource")
    } else if operation == OperationLabel::Other {
        Some("neither CREATE nor UPDATE")
    } else {
        (ctx.skip_namespace)(namespace)
    };
    if let Some(reason) = skip {
        out.decision = Decision::Unchanged {
            reason: Some(reason),
        };
        out.body = write_response(uid, true, None, None);
        return out;
    }
    let Some(pod) = object.as_ref() else {
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
    let resolve_ctx = ResolveContext {
        namespace,
        operation: if operation == OperationLabel::Update {
            Operation::Update
        } else {
            Operation::Create
        },
        config: ctx.config,
    };
    let previous_resolved = match resolve_ctx.operation {
        Operation::Update => request
            .old_object
            .as_ref()
            .and_then(OldObjectIn::resolved_qos),
        Operation::Create => pod.annotation(ANNOTATION_RESOLVED_QOS),
    };
    match resolve_pod_with_previous(pod, &resolve_ctx, previous_resolved) {
        Ok(resolution) => {
            out.qos_class = Some(resolution.resolved.qos_class);
            if resolution.changes.is_empty() {
                out.body = write_response(uid, true, None, None);
            } else {
                let patch = json_patch(pod, &resolution.changes);
                let ops = patch.as_array().map_or(0, Vec::len);
                // Serialising a Value into a Vec cannot fail (no maps with non-string keys).
                let patch = serde_json::to_vec(&patch).unwrap_or_default();
                out.body = write_response(uid, true, Some(&patch), None);
                out.decision = Decision::Mutated { ops };
            }
        }
        Err(e) => {
            let message = format!("pod {}: {e}", out.pod);
            out.body = write_response(uid, false, None, Some(ResponseStatus::invalid(&message)));
            out.decision = Decision::Denied { message };
        }
    }
    out
}

/// The fast parse failed: find out as much as possible for a useful answer.
fn review_unreadable(body: &[u8], first_error: &serde_json::Error) -> Reviewed {
    let Ok(review) = serde_json::from_slice::<LenientReviewIn<'_>>(body) else {
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
            uid: uid.to_owned(),
            operation,
            namespace: String::new(),
            pod: String::new(),
            dry_run: false,
            qos_class: None,
            decision: Decision::Unchanged {
                reason: Some("not a Pod"),
            },
            body: write_response(uid, true, None, None),
        };
    }
    let message = match request.object {
        Some(object) => match serde_json::from_str::<PodView<'_>>(object.get()) {
            Err(e) => format!("request.object is not a valid Pod: {e}"),
            Ok(_) => format!("malformed AdmissionReview request: {first_error}"),
        },
        None => format!("malformed AdmissionReview request: {first_error}"),
    };
    error_reviewed(uid, operation, message)
}

fn error_reviewed(uid: &str, operation: OperationLabel, message: String) -> Reviewed {
    Reviewed {
        uid: uid.to_owned(),
        operation,
        namespace: String::new(),
        pod: String::new(),
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
    super::response::write_response_with_warning(uid, warning)
}
