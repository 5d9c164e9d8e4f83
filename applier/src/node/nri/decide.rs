//! What the plugin answers for one container: the pod from the watch -> the container's values
//! as OCI resources, or why none. Pure; the checks are the reconcile path's
//! ([`koord_translator::pod::plan::container_plan`]).

use k8s_openapi::api::core::v1::Pod;
use koord_api::ResolvedQos;

use koord_translator::cgroup::CgroupVersion;
use koord_translator::pod::phase;
use koord_translator::pod::plan::{self, NodeCaps};
use koord_translator::pod::spec_view::PodSpecView;

use super::adjust::{self, NodeFiles};
use super::proto::LinuxResources;

/// Why a container gets no adjustment; the `outcome` label of the request metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The request named no pod or container.
    BadRequest,
    /// The watch did not show the pod within the wait.
    UnknownPod,
    /// Succeeded or Failed.
    NotActive,
    Unannotated,
    /// The annotation is not a resolved-qos document this version reads.
    Malformed,
    /// The annotation does not fit the pod spec (the reconcile path reports why).
    Refused,
    /// Valid, but nothing for this container that can be set at creation.
    NothingToSet,
    /// The answer's deadline passed first.
    Deadline,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::BadRequest => "bad_request",
            Skip::UnknownPod => "unknown_pod",
            Skip::NotActive => "not_active",
            Skip::Unannotated => "unannotated",
            Skip::Malformed => "malformed",
            Skip::Refused => "refused",
            Skip::NothingToSet => "nothing_to_set",
            Skip::Deadline => "deadline",
        }
    }
}

/// The node facts the answer depends on, fixed while the applier runs.
#[derive(Debug, Clone)]
pub struct Decider {
    pub version: CgroupVersion,
    pub caps: NodeCaps,
    pub files: NodeFiles,
}

impl Decider {
    /// The container's values for the runtime, or why none.
    pub fn decide(&self, pod: &Pod, container: &str) -> Result<LinuxResources, Skip> {
        if !phase::is_active(pod) {
            return Err(Skip::NotActive);
        }
        let view = PodSpecView::from_pod(pod).map_err(|_| Skip::Refused)?;
        self.decide_view(&view, container)
    }

    pub fn decide_view(&self, view: &PodSpecView, container: &str) -> Result<LinuxResources, Skip> {
        let raw = view.resolved_qos.as_deref().ok_or(Skip::Unannotated)?;
        let q = ResolvedQos::from_annotation(raw).map_err(|_| Skip::Malformed)?;
        let values = plan::container_plan(&q, view, container, self.caps).map_err(|refused| {
            tracing::debug!(pod = %view.name, namespace = %view.namespace, container, reason = %refused, "NRI: annotation refused, no adjustment");
            Skip::Refused
        })?;
        adjust::resources(self.version, &values, &self.files).ok_or(Skip::NothingToSet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LS: &str = include_str!("../../../tests/fixtures/ls-redis.json");
    const BE: &str = include_str!("../../../tests/fixtures/be-transcode.json");
    const BARE: &str = include_str!("../../../tests/fixtures/unannotated.json");

    fn pod(json: &str) -> Pod {
        serde_json::from_str(json).expect("fixture")
    }

    fn decider(version: CgroupVersion) -> Decider {
        Decider {
            version,
            caps: NodeCaps {
                bvt_warp_ns: false,
                ..NodeCaps::default()
            },
            files: NodeFiles {
                v2: NodeFiles::v2_candidates().collect(),
                v1_memsw: false,
            },
        }
    }

    #[test]
    fn decisions_table() {
        let d = decider(CgroupVersion::V2);
        let ls = pod(LS);
        let r = d.decide(&ls, "redis").expect("LS container");
        assert_eq!(
            r.unified.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "memory.high",
                "memory.low",
                "memory.min",
                "memory.oom.group"
            ]
        );
        let be = pod(BE);
        let r = d.decide(&be, "ffmpeg").expect("BE container");
        assert_eq!(
            r.unified.get("cpu.max").map(String::as_str),
            Some("7000000 100000")
        );
        assert_eq!(
            r.unified.get("memory.max").map(String::as_str),
            Some("23622320128")
        );
        assert_eq!(d.decide(&be, "no-such-container"), Err(Skip::NothingToSet));
        assert_eq!(d.decide(&pod(BARE), "app"), Err(Skip::Unannotated));

        // Forged: memory.min above the container's request is refused, as the reconcile path
        // refuses it.
        let with_annotation = |f: &dyn Fn(&str) -> String| {
            let mut p = ls.clone();
            let ann = p.metadata.annotations.as_mut().expect("annotations");
            let raw = ann
                .get_mut(koord_api::keys::ANNOTATION_RESOLVED_QOS)
                .expect("resolved");
            *raw = f(raw);
            p
        };
        let forged = with_annotation(&|raw| {
            let mut q: serde_json::Value = serde_json::from_str(raw).expect("json");
            q["memoryQOS"]["containers"]["redis"]["memory.min"] = serde_json::json!(1i64 << 40);
            q.to_string()
        });
        assert_eq!(d.decide(&forged, "redis"), Err(Skip::Refused));
        let garbled = with_annotation(&|_| "{not json".into());
        assert_eq!(d.decide(&garbled, "redis"), Err(Skip::Malformed));

        let mut done = ls.clone();
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert_eq!(d.decide(&done, "redis"), Err(Skip::NotActive));

        // v1 (no memsw): the LS pod has nothing NRI can carry, the BE pod its CPU values.
        let d1 = decider(CgroupVersion::V1);
        assert_eq!(d1.decide(&ls, "redis"), Err(Skip::NothingToSet));
        let r = d1.decide(&be, "ffmpeg").expect("cpu");
        assert_eq!(r.cpu.and_then(|c| c.shares).map(|s| s.value), Some(71_680));
    }
}
