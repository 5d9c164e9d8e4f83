//! What the NRI plugin adds to a container's creation, measured without a runtime:
//! - `decide`: the answer itself (parse the annotation, check it against the pod spec, map it
//!   to OCI resources) for the LS fixture pod;
//! - `create_container_round_trip`: one `CreateContainer` request and its answer through a real
//!   Unix socket, the multiplexer and ttrpc, as containerd sends it.
//!
//! Run: cargo bench -p koord-applier --bench nri

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::nri::adjust::NodeFiles;
use koord_applier::node::nri::decide::Decider;
use koord_applier::node::nri::link::Link;
use koord_applier::node::nri::proto::{self, service};
use koord_applier::node::nri::{self, NriMode, Settings, mux, ttrpc};
use koord_translator::cgroup::CgroupVersion;
use koord_translator::pod::plan::NodeCaps;
use kube::runtime::reflector;
use kube::runtime::watcher;
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

fn fixture() -> Pod {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ls-redis.json"
    ))
    .expect("fixture");
    serde_json::from_str(&text).expect("pod")
}

fn decider() -> Decider {
    Decider {
        version: CgroupVersion::V2,
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

/// Sends one framed ttrpc request on connection `conn` and reads messages until the answer.
async fn round_trip(s: &mut UnixStream, conn: u32, stream_id: u32, req: &[u8]) -> Vec<u8> {
    let msg = ttrpc::encode(stream_id, ttrpc::TYPE_REQUEST, req).expect("small");
    let mut out = Vec::new();
    mux::encode(conn, &msg, &mut out);
    s.write_all(&out).await.expect("write");
    let mut reader = ttrpc::Reader::default();
    loop {
        let mut h = [0u8; mux::HEADER_LEN];
        s.read_exact(&mut h).await.expect("header");
        let (c, n) = mux::parse_header(h).expect("frame");
        let mut p = vec![0; n];
        s.read_exact(&mut p).await.expect("payload");
        if c != conn {
            continue;
        }
        reader.push(&p);
        if let Some((_, body)) = reader.next_message().expect("message") {
            return proto::Response::decode(body.as_slice())
                .expect("response")
                .payload;
        }
    }
}

fn benches(c: &mut Criterion) {
    let pod = fixture();
    let d = decider();
    c.bench_function("nri/decide (LS pod, one container)", |b| {
        b.iter(|| {
            d.decide(std::hint::black_box(&pod), "redis")
                .expect("adjusted")
        })
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tmp");
    let socket = dir.path().join("nri.sock");
    let (mut stream, _task) = rt.block_on(async {
        let listener = UnixListener::bind(&socket).expect("bind");
        let (store, mut writer) = reflector::store::<Pod>();
        writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
        let (link, _nudges) = Link::new(decider(), None);
        let settings = Settings {
            mode: NriMode::Auto,
            socket: socket.clone(),
            plugin_index: "50".into(),
            answer_deadline: Duration::from_millis(500),
            pod_wait: Duration::from_millis(250),
        };
        let task = nri::start(Arc::new(link), store, settings).expect("started");
        let (mut s, _) = listener.accept().await.expect("accept");
        // Registration: answer RegisterPlugin, then configure the plugin.
        let mut h = [0u8; mux::HEADER_LEN];
        s.read_exact(&mut h).await.expect("header");
        let (_, n) = mux::parse_header(h).expect("frame");
        let mut p = vec![0; n];
        s.read_exact(&mut p).await.expect("register");
        let ok = proto::Response {
            status: None,
            payload: Vec::new(),
        }
        .encode_to_vec();
        let msg = ttrpc::encode(1, ttrpc::TYPE_RESPONSE, &ok).expect("small");
        let mut out = Vec::new();
        mux::encode(mux::RUNTIME_SERVICE_CONN, &msg, &mut out);
        s.write_all(&out).await.expect("answer");
        let cfg = proto::Request {
            service: service::PLUGIN.into(),
            method: "Configure".into(),
            payload: proto::ConfigureRequest {
                request_timeout: 2000,
                ..Default::default()
            }
            .encode_to_vec(),
            timeout_nano: 2_000_000_000,
        };
        round_trip(&mut s, mux::PLUGIN_SERVICE_CONN, 1, &cfg.encode_to_vec()).await;
        (s, task)
    });
    let req = proto::Request {
        service: service::PLUGIN.into(),
        method: "CreateContainer".into(),
        payload: proto::CreateContainerRequest {
            pod: Some(proto::PodSandbox {
                id: "sb".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            }),
            container: Some(proto::Container {
                id: "c0ffee".into(),
                pod_sandbox_id: "sb".into(),
                name: "redis".into(),
            }),
        }
        .encode_to_vec(),
        timeout_nano: 2_000_000_000,
    }
    .encode_to_vec();
    let mut stream_id = 3u32;
    c.bench_function("nri/CreateContainer round trip over the socket", |b| {
        b.iter(|| {
            stream_id += 2;
            let answer = rt.block_on(round_trip(
                &mut stream,
                mux::PLUGIN_SERVICE_CONN,
                stream_id,
                &req,
            ));
            let resp = proto::CreateContainerResponse::decode(answer.as_slice()).expect("answer");
            assert!(resp.adjust.is_some(), "adjusted");
        })
    });
}

criterion_group!(nri_benches, benches);
criterion_main!(nri_benches);
