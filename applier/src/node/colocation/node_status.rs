//! The Node side: read allocatable and the batch resources already advertised, and patch
//! `status.capacity` / `status.allocatable` with `kubernetes.io/batch-cpu` (milli-cores, plain
//! integer) and `kubernetes.io/batch-memory` (bytes).
//!
//! RBAC can only name resources, so a DaemonSet's ClusterRole cannot say "your own node": any
//! applier could patch any Node's status (the kubelet has the NodeRestriction admission plugin
//! for that; nothing equivalent exists for service accounts short of a ValidatingAdmissionPolicy
//! comparing the node name with the caller's pod, see the manifests). The verbs are the minimum:
//! get on nodes, get/patch on nodes/status.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_api::keys::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY};
use koord_api::quantity::{parse_milli, parse_value};
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;

use super::capacity::Resources;

type List = BTreeMap<String, Quantity>;

fn get(list: Option<&List>, key: &str, milli: bool) -> Option<i64> {
    let q = list?.get(key)?;
    if milli {
        parse_milli(&q.0)
    } else {
        parse_value(&q.0)
    }
    .ok()
}

/// `status.allocatable` cpu (milli) and memory (bytes).
pub fn allocatable(node: &Node) -> Option<Resources> {
    let a = node.status.as_ref()?.allocatable.as_ref();
    Some(Resources::new(
        get(a, RESOURCE_CPU, true)?,
        get(a, RESOURCE_MEMORY, false)?,
    ))
}

/// The batch resources on the Node, `None` when one is missing or capacity and allocatable
/// disagree (someone else wrote one of them: rewrite both).
pub fn advertised_on_node(node: &Node) -> Option<Resources> {
    let s = node.status.as_ref()?;
    let read = |l: Option<&List>| -> Option<Resources> {
        // batch-cpu is already an integer of milli-cores: read as a plain value.
        Some(Resources::new(
            get(l, RESOURCE_BATCH_CPU, false)?,
            get(l, RESOURCE_BATCH_MEMORY, false)?,
        ))
    };
    let cap = read(s.capacity.as_ref())?;
    let alloc = read(s.allocatable.as_ref())?;
    (cap == alloc).then_some(cap)
}

/// The merge patch of the status subresource.
pub fn patch_body(r: Resources) -> serde_json::Value {
    let list = serde_json::json!({
        RESOURCE_BATCH_CPU: r.cpu_milli.to_string(),
        RESOURCE_BATCH_MEMORY: r.memory_bytes.to_string(),
    });
    serde_json::json!({"status": {"capacity": list, "allocatable": list}})
}

pub const FIELD_MANAGER: &str = "koord-applier-colocation";

/// Patches the Node's status.
pub async fn patch(api: &Api<Node>, name: &str, r: Resources) -> Result<Node, kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(name, &params, &Patch::Merge(patch_body(r)))
        .await
}
