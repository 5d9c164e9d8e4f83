//! The protobuf messages the plugin exchanges: ttrpc's envelope (`Request`, `Response`,
//! `google.rpc.Status`) and the subset of NRI's `pkg/api/api.proto` (package
//! `nri.pkg.api.v1alpha1`, NRI v0.12) that a plugin setting cgroup values at container creation
//! needs. Field numbers and types are NRI's; fields the plugin never reads are left out, and
//! prost skips them when decoding (protobuf's rule for unknown fields), so a newer runtime's
//! extra fields do no harm. `tests/nri_golden.rs` decodes messages encoded by the NRI Go module
//! itself to check these definitions.

use std::collections::BTreeMap;

/// ttrpc's request envelope (`github.com/containerd/ttrpc/request.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline, relative, in nanoseconds (0 = none).
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's response envelope.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status` (details left out).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC status codes the plugin answers with.
pub mod code {
    pub const OK: i32 = 0;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// The two services and their methods, as ttrpc names them on the wire.
pub mod service {
    pub const RUNTIME: &str = "nri.pkg.api.v1alpha1.Runtime";
    pub const PLUGIN: &str = "nri.pkg.api.v1alpha1.Plugin";
}

/// NRI's `Event` numbers; a plugin subscribes with the mask of `1 << (event - 1)`.
pub mod event {
    pub const RUN_POD_SANDBOX: u32 = 1;
    pub const CREATE_CONTAINER: u32 = 4;
    pub const UPDATE_CONTAINER: u32 = 8;

    pub const fn mask(events: &[u32]) -> i32 {
        let mut m = 0i32;
        let mut i = 0;
        while i < events.len() {
            m |= 1 << (events[i] - 1);
            i += 1;
        }
        m
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
    #[prost(string, tag = "3")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersRequest {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub failed: Vec<ContainerUpdate>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    #[prost(string, tag = "1")]
    pub config: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// Milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// Milliseconds: how long the runtime waits for any answer of the plugin.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
    #[prost(string, tag = "6")]
    pub nri_version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    #[prost(int32, tag = "2")]
    pub events: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    #[prost(bool, tag = "2")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResponse {
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// The pod a request is about: its CRI sandbox metadata.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub uid: String,
    #[prost(string, tag = "4")]
    pub namespace: String,
}

/// The container a request is about; `name` is the Kubernetes container name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

/// OCI resources. `unified` is cgroup v2's file -> value map (runc writes it after the
/// typed fields, into the container's own cgroup).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
    #[prost(btree_map = "string, string", tag = "6")]
    pub unified: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxMemory {
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn event_mask_is_nris() {
        // RUN_POD_SANDBOX (1), CREATE_CONTAINER (4), UPDATE_CONTAINER (8): bits 0, 3, 7.
        assert_eq!(
            event::mask(&[
                event::RUN_POD_SANDBOX,
                event::CREATE_CONTAINER,
                event::UPDATE_CONTAINER
            ]),
            0b1000_1001
        );
    }

    #[test]
    fn unknown_fields_are_skipped() {
        // A PodSandbox with labels (field 5, a map entry) and ips (field 10) the plugin does
        // not declare: decoding keeps what it knows.
        let mut bytes = PodSandbox {
            id: "sb".into(),
            name: "web".into(),
            uid: "u-1".into(),
            namespace: "ns".into(),
        }
        .encode_to_vec();
        bytes.extend_from_slice(&[0x2a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'b']); // labels {a: b}
        bytes.extend_from_slice(&[0x52, 0x03, b'1', b'.', b'2']); // ips ["1.2"]
        let pod = PodSandbox::decode(bytes.as_slice()).expect("decodes");
        assert_eq!((pod.name.as_str(), pod.uid.as_str()), ("web", "u-1"));
    }
}
