//! The applier's hand-declared NRI messages (`nri::proto`) against messages encoded by the NRI
//! Go module itself (v0.12.3, the one containerd 2.4.2 links): `tests/fixtures/nri/*.bin`,
//! written by `tests/nri_golden/main.go`. What the plugin reads decodes to the values Go put
//! in (past every field it does not declare), and what it writes is byte for byte what Go
//! writes for the same values.

use std::collections::BTreeMap;
use std::path::Path;

use koord_applier::node::nri::proto::{self, *};
use prost::Message as _;

fn golden(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nri")
        .join(format!("{name}.bin"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn resources() -> LinuxResources {
    LinuxResources {
        memory: Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: 134_217_728 }),
        }),
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: 1024 }),
            quota: Some(OptionalInt64 { value: 50_000 }),
            period: Some(OptionalUInt64 { value: 100_000 }),
        }),
        unified: [
            ("memory.min", "134217728"),
            ("memory.low", "134217728"),
            ("memory.high", "max"),
            ("cpu.max", "50000 100000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect::<BTreeMap<_, _>>(),
    }
}

fn container_update() -> ContainerUpdate {
    ContainerUpdate {
        container_id: "c0ffee".into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(resources()),
        }),
        ignore_failure: true,
    }
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "6e1f7b9d".into(),
        name: "redis-0".into(),
        uid: "0f0f0f0f-1111-4222-8333-444455556666".into(),
        namespace: "shop".into(),
    }
}

fn container() -> Container {
    Container {
        id: "c0ffee".into(),
        pod_sandbox_id: "6e1f7b9d".into(),
        name: "redis".into(),
    }
}

/// What the runtime sends: decoded past labels, annotations, mounts, args, the container's
/// own resources and every other field the plugin does not declare.
#[test]
fn requests_from_go_decode() {
    let r = CreateContainerRequest::decode(golden("create_container_request").as_slice())
        .expect("CreateContainerRequest");
    assert_eq!((r.pod, r.container), (Some(pod()), Some(container())));
    let r = UpdateContainerRequest::decode(golden("update_container_request").as_slice())
        .expect("UpdateContainerRequest");
    assert_eq!(
        (r.pod, r.container, r.linux_resources),
        (Some(pod()), Some(container()), Some(resources()))
    );
    let r = RunPodSandboxRequest::decode(golden("run_pod_sandbox_request").as_slice())
        .expect("RunPodSandboxRequest");
    assert_eq!(r.pod, Some(pod()));
    let r = SynchronizeRequest::decode(golden("synchronize_request").as_slice())
        .expect("SynchronizeRequest");
    assert_eq!(
        (r.pods, r.containers, r.more),
        (vec![pod()], vec![container()], true)
    );
    let r =
        ConfigureRequest::decode(golden("configure_request").as_slice()).expect("ConfigureRequest");
    assert_eq!(
        r,
        ConfigureRequest {
            config: String::new(),
            runtime_name: "containerd".into(),
            runtime_version: "v2.4.2".into(),
            registration_timeout: 5000,
            request_timeout: 2000,
            nri_version: "v0.12.3".into(),
        }
    );
}

/// What the plugin sends: the same bytes as Go's deterministic encoding.
#[test]
fn answers_encode_as_go_does() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "create_container_response",
            CreateContainerResponse {
                adjust: Some(ContainerAdjustment {
                    linux: Some(LinuxContainerAdjustment {
                        resources: Some(resources()),
                    }),
                }),
                update: vec![container_update()],
            }
            .encode_to_vec(),
        ),
        (
            "update_containers_request",
            UpdateContainersRequest {
                update: vec![container_update()],
            }
            .encode_to_vec(),
        ),
        (
            "configure_response",
            ConfigureResponse {
                events: koord_applier::node::nri::plugin::EVENTS,
            }
            .encode_to_vec(),
        ),
        (
            "register_plugin_request",
            RegisterPluginRequest {
                plugin_name: "koord-applier".into(),
                plugin_idx: "50".into(),
                nri_version: koord_applier::node::nri::NRI_VERSION.into(),
            }
            .encode_to_vec(),
        ),
    ];
    for (name, ours) in cases {
        assert_eq!(ours, golden(name), "{name}");
    }
    // And back: Go's answer decodes to the same message.
    let back = CreateContainerResponse::decode(golden("create_container_response").as_slice())
        .expect("decode");
    assert_eq!(
        back.adjust
            .and_then(|a| a.linux)
            .and_then(|l| l.resources)
            .map(|r| r.unified),
        Some(resources().unified)
    );
    assert_eq!(proto::event::mask(&[1, 4, 8]), 0x89);
}
