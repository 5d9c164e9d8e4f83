//! Which containers of a pod the loop runs for, and with what floor: pure (the container
//! directories come from the layout, no file is read).
//!
//! The annotation is not trusted blindly: its parameters must be in the contract's ranges, the
//! whole annotation must pass the pod pass's check against the spec, and each container's
//! floor must be at least what the spec and the annotation's own `memory.min` give
//! ([`koord_api::proactive_reclaim_floor`]). A floor lower than that (a forged or stale
//! annotation) would let the loop reclaim memory the pod asked to keep: the pod is refused,
//! and its Event names the field and why, in the words of the pod pass's refusals.

use std::path::Path;
use std::sync::Arc;

use koord_api::{ProactiveReclaimParams, ResolvedQos, proactive_reclaim_floor};
use koord_translator::cgroup::layout::Layout;
use koord_translator::pod::event::{EventKind, PodEvent, truncate_note};
use koord_translator::pod::plan;
use koord_translator::pod::spec_view::PodSpecView;

use super::cgroup::Lack;
use crate::node::shared::container_dir::container_memory_dir;

/// Warning: the annotation's section does not hold against the spec; no reclaim for the pod.
pub const REASON_REFUSED: &str = "ProactiveReclaimRefused";
/// Normal: the pod asks for the loop, this node's kernel cannot run it; nothing done.
pub const REASON_UNSUPPORTED: &str = "ProactiveReclaimUnsupported";

/// One container the loop runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptIn {
    pub container: String,
    /// Its memory cgroup, from the layout (never from annotation text).
    pub dir: Arc<Path>,
    /// The bytes never reclaimed below: the annotation's (checked to be at least the
    /// recomputed floor).
    pub floor: u64,
}

/// What the loop does with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No `proactiveReclaim` section, or `enabled: false` (or no annotation the contract
    /// reads: the pod pass says so).
    Off,
    /// Loop these containers (those started; the others join once they are).
    Loop {
        params: ProactiveReclaimParams,
        containers: Vec<OptIn>,
    },
    /// The pod pass refuses the annotation (and posts why): no loop, no second Event.
    AnnotationRefused,
    /// The section does not hold: no loop for the pod, and an Event.
    Refused {
        /// The refusal counter's `reason` label.
        reason: &'static str,
        /// The field and why.
        why: String,
    },
    /// The pod asks, the node cannot: an Event, nothing done.
    Unsupported(Lack),
}

impl Verdict {
    /// The refusal counter's `reason` label, for a pod the loop does not run for although it
    /// asks.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Off | Verdict::Loop { .. } => None,
            Verdict::AnnotationRefused => Some("annotation-refused"),
            Verdict::Refused { reason, .. } => Some(reason),
            Verdict::Unsupported(lack) => Some(lack.reason()),
        }
    }

    /// The Event this verdict deserves (once per version of the pod).
    pub fn event(&self, pod: &PodSpecView) -> Option<PodEvent> {
        let (kind, reason, message) = match self {
            Verdict::Refused { why, .. } => (
                EventKind::Warning,
                REASON_REFUSED,
                format!("koordinator.sh/resolved-qos proactiveReclaim refused, no reclaim: {why}"),
            ),
            Verdict::Unsupported(lack) => (
                EventKind::Normal,
                REASON_UNSUPPORTED,
                format!(
                    "koordinator.sh/resolved-qos proactiveReclaim: unsupported on this node: {}; no reclaim",
                    lack.text()
                ),
            ),
            _ => return None,
        };
        Some(PodEvent {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            kind,
            reason,
            message: truncate_note(message),
        })
    }
}

/// The loop's verdict on `pod` on a node with `support`.
pub fn verdict(pod: &PodSpecView, layout: &Layout, support: Result<(), Lack>) -> Verdict {
    let Some(q) = pod
        .resolved_qos
        .as_deref()
        .and_then(|raw| ResolvedQos::from_annotation(raw).ok())
    else {
        return Verdict::Off;
    };
    let Some(pr) = q.proactive_reclaim.as_ref().filter(|p| p.enabled) else {
        return Verdict::Off;
    };
    if let Err(lack) = support {
        return Verdict::Unsupported(lack);
    }
    if let Some((spec, v)) = pr.params.out_of_range() {
        return Verdict::Refused {
            reason: "param-out-of-range",
            why: format!(
                "proactiveReclaim.params.{} = {v} is outside {}..={}",
                spec.name, spec.min, spec.max
            ),
        };
    }
    if plan::validate(&q, pod).is_err() {
        return Verdict::AnnotationRefused;
    }
    let mut containers = Vec::new();
    for (name, floor) in &pr.containers {
        let field = format!("proactiveReclaim.containers[{name:?}]");
        let Some(c) = pod.container(name) else {
            return Verdict::Refused {
                reason: "no-such-container",
                why: format!("{field}: the pod spec has no such container"),
            };
        };
        let memory_min = q.memory_qos.containers.get(name).map_or(0, |k| k.min);
        let request = c.memory_request.or(c.batch_memory_request);
        let percent = pr.params.floor_percent;
        let recomputed = proactive_reclaim_floor(memory_min, request, percent);
        if floor.floor_bytes < recomputed {
            let what = if c.sidecar {
                "the sidecar's memory request"
            } else {
                "the container's memory request"
            };
            return Verdict::Refused {
                reason: "floor-below-spec",
                why: format!(
                    "{field}.floorBytes = {} is below max(memory.min {memory_min}, floorPercent {percent}% of {what} {}) = {recomputed}",
                    floor.floor_bytes,
                    request.unwrap_or(0)
                ),
            };
        }
        let Some(dir) = c
            .container_id
            .as_deref()
            .and_then(|id| container_memory_dir(layout, pod, id))
        else {
            continue;
        };
        containers.push(OptIn {
            container: name.clone(),
            dir,
            floor: u64::try_from(floor.floor_bytes).unwrap_or(0),
        });
    }
    Verdict::Loop {
        params: pr.params,
        containers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use koord_api::{DecisionSource, ProactiveReclaimFloor, ResolvedProactiveReclaim};
    use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
    use koord_translator::pod::event::EventKind;

    const MIB: i64 = 1 << 20;

    /// `ls-redis.json` (redis: 50 MiB request, memory.min 50 MiB; exporter: memory.min 20 MiB)
    /// with a proactive reclaim section changed by `edit`.
    fn pod(edit: impl FnOnce(&mut ResolvedProactiveReclaim)) -> PodSpecView {
        let mut pod: Pod =
            serde_json::from_str(include_str!("../../../tests/fixtures/ls-redis.json"))
                .expect("fixture");
        let ann = pod.metadata.annotations.as_mut().expect("annotations");
        let key = koord_api::keys::ANNOTATION_RESOLVED_QOS;
        let mut q = ResolvedQos::from_annotation(&ann[key]).expect("annotation");
        let mut pr = ResolvedProactiveReclaim {
            enabled: true,
            params: ProactiveReclaimParams {
                floor_percent: 50,
                ..ProactiveReclaimParams::DEFAULT
            },
            source: DecisionSource::PodAnnotation,
            containers: [("redis", 50 * MIB), ("exporter", 20 * MIB)]
                .into_iter()
                .map(|(n, b)| (n.to_owned(), ProactiveReclaimFloor { floor_bytes: b }))
                .collect(),
        };
        edit(&mut pr);
        q.proactive_reclaim = Some(pr);
        ann.insert(key.to_owned(), q.to_annotation());
        PodSpecView::from_pod(&pod).expect("view")
    }

    fn layout() -> Layout {
        Layout::new("/sys/fs/cgroup", CgroupVersion::V2, CgroupDriver::Cgroupfs)
    }

    fn refusal(v: &Verdict) -> (&'static str, String) {
        match v {
            Verdict::Refused { reason, why } => (reason, why.clone()),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_valid_section_loops_each_started_container_with_its_floor() {
        let v = verdict(&pod(|_| {}), &layout(), Ok(()));
        let Verdict::Loop { params, containers } = v else {
            panic!("{v:?}")
        };
        assert_eq!(params.floor_percent, 50);
        let got: Vec<(&str, u64)> = containers
            .iter()
            .map(|c| (c.container.as_str(), c.floor))
            .collect();
        assert_eq!(got, [("exporter", 20 << 20), ("redis", 50 << 20)]);
        for c in &containers {
            assert!(
                c.dir.starts_with(
                    "/sys/fs/cgroup/kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab"
                ),
                "{}",
                c.dir.display()
            );
        }
        // A floor above the recomputed one only keeps more: accepted.
        let higher = pod(|p| p.containers.get_mut("redis").expect("redis").floor_bytes = 80 * MIB);
        assert!(matches!(
            verdict(&higher, &layout(), Ok(())),
            Verdict::Loop { .. }
        ));
    }

    #[test]
    fn a_forged_floor_is_refused_by_field_with_an_event() {
        let p = pod(|p| p.containers.get_mut("redis").expect("redis").floor_bytes = 0);
        let v = verdict(&p, &layout(), Ok(()));
        let (reason, why) = refusal(&v);
        assert_eq!(reason, "floor-below-spec");
        assert_eq!(
            why,
            "proactiveReclaim.containers[\"redis\"].floorBytes = 0 is below max(memory.min 52428800, floorPercent 50% of the container's memory request 52428800) = 52428800"
        );
        let ev = v.event(&p).expect("event");
        assert_eq!((ev.kind, ev.reason), (EventKind::Warning, REASON_REFUSED));
        assert!(ev.message.starts_with("koordinator.sh/resolved-qos proactiveReclaim refused, no reclaim: proactiveReclaim.containers[\"redis\"].floorBytes"));
        assert_eq!(v.refusal_reason(), Some("floor-below-spec"));
    }

    #[test]
    fn out_of_range_parameters_and_unknown_containers_are_refused() {
        let p = pod(|p| p.params.step_permill = 101);
        assert_eq!(
            refusal(&verdict(&p, &layout(), Ok(()))),
            (
                "param-out-of-range",
                "proactiveReclaim.params.stepPermill = 101 is outside 1..=100".to_owned()
            )
        );
        let p = pod(|p| p.params.interval_seconds = 0);
        assert_eq!(
            refusal(&verdict(&p, &layout(), Ok(()))).0,
            "param-out-of-range"
        );
        let p = pod(|p| {
            p.containers
                .insert("ghost".into(), ProactiveReclaimFloor { floor_bytes: 0 });
        });
        assert_eq!(
            refusal(&verdict(&p, &layout(), Ok(()))),
            (
                "no-such-container",
                "proactiveReclaim.containers[\"ghost\"]: the pod spec has no such container"
                    .to_owned()
            )
        );
    }

    #[test]
    fn off_unsupported_and_refused_annotations() {
        assert_eq!(
            verdict(&pod(|p| p.enabled = false), &layout(), Ok(())),
            Verdict::Off
        );
        let p = pod(|_| {});
        let v = verdict(&p, &layout(), Err(Lack::CgroupV1));
        assert_eq!(v, Verdict::Unsupported(Lack::CgroupV1));
        let ev = v.event(&p).expect("event");
        assert_eq!(
            (ev.kind, ev.reason),
            (EventKind::Normal, REASON_UNSUPPORTED)
        );
        assert_eq!(
            ev.message,
            "koordinator.sh/resolved-qos proactiveReclaim: unsupported on this node: memory.reclaim and memory.pressure (cgroup v1); no reclaim"
        );
        assert_eq!(v.refusal_reason(), Some("cgroup-v1"));
        // An annotation the pod pass refuses (memory.high above the limit): no loop, and its
        // Event is the pod pass's.
        let mut forged = pod(|_| {});
        forged.resolved_qos = forged.resolved_qos.map(|a| {
            a.replacen(
                "\"memory.high\":83886080",
                "\"memory.high\":999999999999",
                1,
            )
        });
        let v = verdict(&forged, &layout(), Ok(()));
        assert_eq!(v, Verdict::AnnotationRefused);
        assert!(v.event(&forged).is_none());
    }
}
