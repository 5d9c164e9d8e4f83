//! One pod and one policy snapshot in, the resolution and its RFC 6902 patch out (pure).
//!
//! Both writers of `koordinator.sh/resolved-qos` call [`patch_pod`]: admission
//! ([`crate::admission`]) for the pod in an AdmissionReview, and the re-resolver
//! ([`crate::reresolve`]) for a pod as it is stored. Whatever the re-resolver writes then
//! passes through admission as an UPDATE of the same pod, which must come to the same answer,
//! or the two would fight: one engine, one answer (docs/contract.md §5).

use koord_api::keys::ANNOTATION_RESOLVED_QOS;

use crate::mutation::{patch_capacity, write_json_patch};
use crate::policy::PolicyConfig;
use crate::resolve::{Operation, PodInput, Resolution, ResolveContext, ResolveError};

/// What a pod needs: the resolution, and the patch that brings the pod there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPatch {
    pub resolution: Resolution,
    /// The RFC 6902 patch as JSON bytes (an array); `None` when the pod already carries the
    /// result.
    pub patch: Option<Vec<u8>>,
    /// Number of operations in `patch` (0 without one).
    pub ops: usize,
}

/// The resolved-qos this webhook wrote before, which keeps the class source stable
/// (docs/contract.md §3, §5).
///
/// On CREATE it is the pod's own. On UPDATE it is the stored pod's (`oldObject`): the incoming
/// one may be a hand edit. A stored pod without one (admitted while the webhook was down) has
/// nothing to protect, so the incoming one is read; the re-resolver's own write is such an
/// UPDATE. Either way the engine keeps a claimed source only when the pod itself proves it.
pub fn previous_resolved<'p>(
    operation: Operation,
    stored: Option<&'p str>,
    incoming: Option<&'p str>,
) -> Option<&'p str> {
    match operation {
        Operation::Create => incoming,
        Operation::Update => stored.or(incoming),
    }
}

/// Resolves `pod` in `namespace` and renders the patch admission would return.
pub fn patch_pod(
    pod: &PodInput<'_>,
    namespace: &str,
    operation: Operation,
    config: &PolicyConfig,
    previous: Option<&str>,
) -> Result<PodPatch, ResolveError> {
    let mut patch = Vec::new();
    let (resolution, ops) =
        patch_pod_into(pod, namespace, operation, config, previous, &mut patch)?;
    Ok(PodPatch {
        resolution,
        patch: (ops > 0).then_some(patch),
        ops,
    })
}

/// [`patch_pod`] with the patch appended to `out` (nothing appended when the pod already
/// carries the result); returns the resolution and the number of operations. Admission
/// writes the patch into the buffer its response is then written into.
pub fn patch_pod_into(
    pod: &PodInput<'_>,
    namespace: &str,
    operation: Operation,
    config: &PolicyConfig,
    previous: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(Resolution, usize), ResolveError> {
    let ctx = ResolveContext {
        namespace,
        operation,
        config,
    };
    let resolution = crate::resolve::resolve_pod_with_previous(pod, &ctx, previous)?;
    if resolution.changes.is_empty() {
        return Ok((resolution, 0));
    }
    // Written straight as bytes (no `serde_json::Value`): this is admission's hot path.
    out.reserve(patch_capacity(&resolution.changes));
    let ops = write_json_patch(out, pod, &resolution);
    Ok((resolution, ops))
}

/// [`patch_pod`] for a pod as it is stored: an UPDATE whose old and new object are that pod.
/// This is exactly what admission answers when the pod is updated without changes.
pub fn patch_stored_pod(
    pod: &PodInput<'_>,
    namespace: &str,
    config: &PolicyConfig,
) -> Result<PodPatch, ResolveError> {
    let own = pod.annotation(ANNOTATION_RESOLVED_QOS);
    let previous = previous_resolved(Operation::Update, own, own);
    patch_pod(pod, namespace, Operation::Update, config, previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_on_create_is_the_pods_own_and_on_update_the_stored_pods() {
        use Operation::{Create, Update};
        for (op, stored, incoming, want) in [
            (Create, None, Some("in"), Some("in")),
            (Create, Some("old"), None, None),
            (Update, Some("old"), Some("in"), Some("old")),
            (Update, Some("old"), None, Some("old")),
            // Admitted while the webhook was down: nothing stored to protect.
            (Update, None, Some("in"), Some("in")),
            (Update, None, None, None),
        ] {
            assert_eq!(
                previous_resolved(op, stored, incoming),
                want,
                "{op:?} {stored:?} {incoming:?}"
            );
        }
    }
}
