//! The NRI plugin against a fake runtime over a real Unix socket. The fake speaks the wire
//! protocol with its own framing code (below, written from NRI's `multiplex` and ttrpc's
//! `channel.go`, not the plugin's `nri::mux`/`nri::ttrpc`), plays containerd's part
//! (registration, `Configure`, `Synchronize`, container events, `UpdateContainers`) and then
//! "restarts": the plugin must come back by itself.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_applier::metrics::Metrics;
use koord_applier::node::nri::adjust::NodeFiles;
use koord_applier::node::nri::decide::Decider;
use koord_applier::node::nri::link::{Link, update};
use koord_applier::node::nri::metrics::NriMetrics;
use koord_applier::node::nri::proto::{self, service};
use koord_applier::node::nri::{self, NriMode, Settings};
use koord_translator::cgroup::CgroupVersion;
use koord_translator::pod::plan::NodeCaps;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

const PLUGIN_CONN: u32 = 1;
const RUNTIME_CONN: u32 = 2;

/// The runtime's end of one plugin connection, framing by hand.
struct FakeRuntime {
    stream: UnixStream,
    /// Bytes received per multiplexed connection, not yet cut into messages.
    inbox: BTreeMap<u32, Vec<u8>>,
    next_stream: u32,
    /// The largest frame the plugin sent (Go's reader needs <= 4096).
    largest_frame: usize,
}

/// One ttrpc message: stream id, type, protobuf payload.
type Msg = (u32, u8, Vec<u8>);

impl FakeRuntime {
    fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            inbox: BTreeMap::new(),
            next_stream: 1,
            largest_frame: 0,
        }
    }

    async fn send(&mut self, conn: u32, stream_id: u32, kind: u8, payload: &[u8]) {
        // One frame holding the whole ttrpc message (Go's writer does so for small messages).
        let mut msg = (payload.len() as u32).to_be_bytes().to_vec();
        msg.extend_from_slice(&stream_id.to_be_bytes());
        msg.extend_from_slice(&[kind, 0]);
        msg.extend_from_slice(payload);
        let mut frame = conn.to_be_bytes().to_vec();
        frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        frame.extend_from_slice(&msg);
        self.stream.write_all(&frame).await.expect("write");
    }

    /// The next whole ttrpc message on `conn`.
    async fn recv(&mut self, conn: u32) -> Msg {
        loop {
            if let Some(buf) = self.inbox.get_mut(&conn)
                && buf.len() >= 10
            {
                let len = u32::from_be_bytes(buf[..4].try_into().expect("4")) as usize;
                if buf.len() >= 10 + len {
                    let sid = u32::from_be_bytes(buf[4..8].try_into().expect("4"));
                    let kind = buf[8];
                    let payload = buf[10..10 + len].to_vec();
                    buf.drain(..10 + len);
                    return (sid, kind, payload);
                }
            }
            let mut h = [0u8; 8];
            tokio::time::timeout(Duration::from_secs(5), self.stream.read_exact(&mut h))
                .await
                .expect("the plugin sent nothing for 5 s")
                .expect("read");
            let c = u32::from_be_bytes(h[..4].try_into().expect("4"));
            let n = u32::from_be_bytes(h[4..].try_into().expect("4")) as usize;
            self.largest_frame = self.largest_frame.max(n);
            let mut p = vec![0; n];
            self.stream.read_exact(&mut p).await.expect("payload");
            self.inbox.entry(c).or_default().extend_from_slice(&p);
        }
    }

    /// Calls the plugin's `method`; returns the decoded answer and how long it took.
    async fn call<R: prost::Message + Default>(
        &mut self,
        method: &str,
        req: &impl prost::Message,
    ) -> (R, Duration) {
        let sid = self.next_stream;
        self.next_stream += 2;
        let env = proto::Request {
            service: service::PLUGIN.into(),
            method: method.into(),
            payload: req.encode_to_vec(),
            timeout_nano: 2_000_000_000,
        };
        let t0 = Instant::now();
        self.send(PLUGIN_CONN, sid, 1, &env.encode_to_vec()).await;
        let (rsid, kind, body) = self.recv(PLUGIN_CONN).await;
        let took = t0.elapsed();
        assert_eq!(
            (rsid, kind),
            (sid, 2),
            "{method}: a response on the same stream"
        );
        let resp = proto::Response::decode(body.as_slice()).expect("response");
        assert!(
            resp.status.as_ref().is_none_or(|s| s.code == 0),
            "{method} answered {:?}: the runtime would fail the container",
            resp.status
        );
        (R::decode(resp.payload.as_slice()).expect("payload"), took)
    }

    /// Answers the plugin's next call on the runtime service; returns (method, request body).
    async fn serve_one(&mut self, answer: &impl prost::Message) -> (String, Vec<u8>) {
        let (sid, kind, body) = self.recv(RUNTIME_CONN).await;
        assert_eq!(kind, 1, "a request");
        let req = proto::Request::decode(body.as_slice()).expect("request");
        assert_eq!(req.service, service::RUNTIME);
        let resp = proto::Response {
            status: None,
            payload: answer.encode_to_vec(),
        };
        self.send(RUNTIME_CONN, sid, 2, &resp.encode_to_vec()).await;
        (req.method, req.payload)
    }

    /// What containerd does with a new plugin: registration, configuration, synchronization.
    async fn handshake(&mut self) -> i32 {
        let (method, body) = self.serve_one(&proto::Empty {}).await;
        assert_eq!(method, "RegisterPlugin");
        let reg = proto::RegisterPluginRequest::decode(body.as_slice()).expect("register");
        assert_eq!(
            (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
            ("koord-applier", "42")
        );
        let (cfg, _) = self
            .call::<proto::ConfigureResponse>(
                "Configure",
                &proto::ConfigureRequest {
                    runtime_name: "containerd".into(),
                    runtime_version: "v2.4.2".into(),
                    request_timeout: 2000,
                    registration_timeout: 5000,
                    nri_version: "v0.12.3".into(),
                    ..Default::default()
                },
            )
            .await;
        for more in [true, false] {
            let (sync, _) = self
                .call::<proto::SynchronizeResponse>(
                    "Synchronize",
                    &proto::SynchronizeRequest {
                        more,
                        ..Default::default()
                    },
                )
                .await;
            assert_eq!((sync.more, sync.update.len()), (more, 0));
        }
        cfg.events
    }

    async fn create(
        &mut self,
        pod: &Pod,
        container: &str,
    ) -> (proto::CreateContainerResponse, Duration) {
        self.call("CreateContainer", &container_request(pod, container))
            .await
    }
}

fn sandbox(pod: &Pod) -> proto::PodSandbox {
    proto::PodSandbox {
        id: "sandbox-1".into(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
    }
}

fn container_request(pod: &Pod, container: &str) -> proto::CreateContainerRequest {
    proto::CreateContainerRequest {
        pod: Some(sandbox(pod)),
        container: Some(proto::Container {
            id: format!("{container}-0123456789abcdef"),
            pod_sandbox_id: "sandbox-1".into(),
            name: container.into(),
        }),
    }
}

fn unified(r: &proto::CreateContainerResponse) -> BTreeMap<String, String> {
    r.adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .map(|r| r.unified.clone())
        .unwrap_or_default()
}

fn store_pod(w: &mut Writer<Pod>, link: &Link, pod: &Pod) {
    w.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
    link.pod_seen();
}

fn metric(m: &Metrics, series: &str) -> f64 {
    m.render()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn accept(l: &UnixListener) -> FakeRuntime {
    let (s, _) = tokio::time::timeout(Duration::from_secs(5), l.accept())
        .await
        .expect("the plugin connected within 5 s")
        .expect("accept");
    FakeRuntime::new(s)
}

fn listen(path: &Path) -> UnixListener {
    let _ = std::fs::remove_file(path);
    UnixListener::bind(path).expect("bind")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_against_a_fake_runtime() {
    let dir = tempfile::tempdir().expect("tmp");
    let socket = dir.path().join("nri.sock");
    let metrics = Metrics::new().expect("metrics");
    let nri_metrics = NriMetrics::register(metrics.registry()).expect("nri metrics");
    let decider = Decider {
        version: CgroupVersion::V2,
        caps: NodeCaps {
            bvt_warp_ns: false,
            ..NodeCaps::default()
        },
        files: NodeFiles {
            v2: NodeFiles::v2_candidates().collect(),
            v1_memsw: false,
        },
    };
    let (link, mut nudges) = Link::new(decider, Some(nri_metrics));
    let link = Arc::new(link);
    let (store, mut writer) = reflector::store::<Pod>();
    let settings = Settings {
        mode: NriMode::Auto,
        socket: socket.clone(),
        plugin_index: "42".into(),
        answer_deadline: Duration::from_millis(500),
        // Long enough that "answered at the pod's arrival" and "waited it out" stay apart on
        // a loaded machine (the bounds below keep 50-300 ms from either side).
        pod_wait: Duration::from_millis(500),
    };

    // The plugin starts before the runtime's socket exists (auto: it waits for it).
    let task = nri::start(link.clone(), store.clone(), settings).expect("auto starts");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        metric(&metrics, "koord_applier_apply_mode{mode=\"watch\"}"),
        1.0
    );
    let listener = listen(&socket);
    let mut rt = accept(&listener).await;
    let events = rt.handshake().await;
    assert_eq!(
        events, 0b1000_1001,
        "RunPodSandbox, CreateContainer, UpdateContainer"
    );
    let t0 = Instant::now();
    while !link.connected() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not connected after Configure"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        metric(&metrics, "koord_applier_apply_mode{mode=\"nri\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "koord_applier_nri_runtime_info{runtime=\"containerd\",version=\"v2.4.2\"}"
        ),
        1.0
    );

    let ls = common::fixture("ls-redis.json");
    store_pod(&mut writer, &link, &ls);
    // The LS container: the annotation's values, as the reconcile path would write them.
    let (resp, took) = rt.create(&ls, "redis").await;
    let want: BTreeMap<String, String> = [
        ("memory.high", "83886080"),
        ("memory.low", "52428800"),
        ("memory.min", "52428800"),
        ("memory.oom.group", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(unified(&resp), want);
    assert!(
        took < Duration::from_millis(400),
        "a known pod answered in {took:?}, near the 500 ms wait"
    );

    // A pod the watch has not seen: "no adjustment" once the 500 ms wait is over, well
    // inside the runtime's 2 s.
    let mut stranger = ls.clone();
    stranger.metadata.name = Some("stranger".into());
    stranger.metadata.uid = Some("0f0f0f0f-0000-4000-8000-000000000001".into());
    let (resp, took) = rt.create(&stranger, "redis").await;
    assert_eq!(resp, proto::CreateContainerResponse::default());
    assert!(
        took >= Duration::from_millis(490) && took < Duration::from_millis(1500),
        "unknown pod answered after {took:?}"
    );

    // A pod that reaches the watch during the wait: adjusted as soon as it is there.
    let mut late = ls.clone();
    late.metadata.name = Some("late".into());
    late.metadata.uid = Some("0f0f0f0f-0000-4000-8000-000000000002".into());
    let req = container_request(&late, "redis");
    let sid = rt.next_stream;
    rt.next_stream += 2;
    let env = proto::Request {
        service: service::PLUGIN.into(),
        method: "CreateContainer".into(),
        payload: req.encode_to_vec(),
        timeout_nano: 2_000_000_000,
    };
    let t0 = Instant::now();
    rt.send(PLUGIN_CONN, sid, 1, &env.encode_to_vec()).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    store_pod(&mut writer, &link, &late);
    let (_, _, body) = rt.recv(PLUGIN_CONN).await;
    let took = t0.elapsed();
    let resp = proto::CreateContainerResponse::decode(
        proto::Response::decode(body.as_slice())
            .expect("env")
            .payload
            .as_slice(),
    )
    .expect("resp");
    assert_eq!(unified(&resp), want, "the late pod");
    assert!(
        took < Duration::from_millis(450),
        "answered {took:?} after, not at the pod's arrival (60 ms) but near the wait's end (500 ms)"
    );

    // A forged annotation (memory.min above the request): no adjustment, as the reconcile path
    // refuses it.
    let mut forged = ls.clone();
    forged.metadata.name = Some("forged".into());
    forged.metadata.uid = Some("0f0f0f0f-0000-4000-8000-000000000003".into());
    let ann = forged.metadata.annotations.as_mut().expect("annotations");
    let raw = ann
        .get_mut(koord_api::keys::ANNOTATION_RESOLVED_QOS)
        .expect("resolved");
    *raw = raw.replacen("\"memory.min\":52428800", "\"memory.min\":99999999999", 1);
    store_pod(&mut writer, &link, &forged);
    let (resp, _) = rt.create(&forged, "redis").await;
    assert_eq!(resp, proto::CreateContainerResponse::default(), "forged");
    let unannotated = common::fixture("unannotated.json");
    store_pod(&mut writer, &link, &unannotated);
    let (resp, _) = rt.create(&unannotated, "redis").await;
    assert_eq!(
        resp,
        proto::CreateContainerResponse::default(),
        "unannotated"
    );
    // A request without a pod: no adjustment, never an error.
    let (resp, _) = rt
        .call::<proto::CreateContainerResponse>("CreateContainer", &proto::Empty {})
        .await;
    assert_eq!(
        resp,
        proto::CreateContainerResponse::default(),
        "empty request"
    );

    // The sandbox hook tells the watch to apply the pod-level values now.
    let (_, _) = rt
        .call::<proto::Empty>(
            "RunPodSandbox",
            &proto::RunPodSandboxRequest {
                pod: Some(sandbox(&ls)),
            },
        )
        .await;
    let nudge = tokio::time::timeout(Duration::from_secs(1), nudges.recv())
        .await
        .expect("a nudge")
        .expect("open");
    assert_eq!(
        nudge,
        (
            ls.metadata.namespace.clone().unwrap_or_default(),
            ls.metadata.name.clone().unwrap_or_default()
        )
    );

    // The kubelet updates the container (a resize): the plugin's update carries the
    // annotation's values for that container.
    let (upd, _) = rt
        .call::<proto::UpdateContainerResponse>(
            "UpdateContainer",
            &proto::UpdateContainerRequest {
                pod: Some(sandbox(&ls)),
                container: container_request(&ls, "redis").container,
                linux_resources: None,
            },
        )
        .await;
    assert_eq!(upd.update.len(), 1);
    assert_eq!(upd.update[0].container_id, "redis-0123456789abcdef");
    assert!(upd.update[0].ignore_failure);

    // The watch asks the runtime to record values it wrote later (UpdateContainers).
    let values = unified(&rt.create(&ls, "exporter").await.0);
    let sender = {
        let link = link.clone();
        tokio::spawn(async move {
            let r = proto::LinuxResources {
                unified: values,
                ..Default::default()
            };
            link.send_updates(vec![update("exporter-id", r)]).await;
        })
    };
    let (method, body) = rt
        .serve_one(&proto::UpdateContainersResponse { failed: vec![] })
        .await;
    assert_eq!(method, "UpdateContainers");
    let req = proto::UpdateContainersRequest::decode(body.as_slice()).expect("updates");
    assert_eq!(req.update[0].container_id, "exporter-id");
    let sent = req.update[0]
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .expect("resources");
    assert_eq!(
        sent.unified.get("memory.min").map(String::as_str),
        Some("20971520")
    );
    sender.await.expect("sent");
    assert_eq!(
        metric(
            &metrics,
            "koord_applier_nri_container_updates_total{result=\"updated\"}"
        ),
        1.0
    );
    assert!(
        rt.largest_frame <= 4096,
        "frame of {} bytes",
        rt.largest_frame
    );

    // containerd restarts: the connection drops, the socket is made anew. The plugin falls
    // back to watch mode, then registers again by itself.
    drop(rt);
    drop(listener);
    let t0 = Instant::now();
    while link.connected() {
        assert!(t0.elapsed() < Duration::from_secs(5), "still connected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        metric(&metrics, "koord_applier_apply_mode{mode=\"watch\"}"),
        1.0
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let listener = listen(&socket);
    let mut rt = accept(&listener).await;
    rt.handshake().await;
    let t1 = Instant::now();
    while !link.connected() {
        assert!(t1.elapsed() < Duration::from_secs(5), "not back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let back = t0.elapsed();
    let (resp, _) = rt.create(&ls, "redis").await;
    assert_eq!(unified(&resp), want, "after the restart");
    assert_eq!(
        metric(
            &metrics,
            "koord_applier_nri_connections_total{result=\"registered\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &metrics,
            "koord_applier_nri_connections_total{result=\"lost\"}"
        ),
        1.0
    );
    assert!(back < Duration::from_secs(3), "reconnected after {back:?}");
    assert!(
        metric(
            &metrics,
            "koord_applier_nri_requests_total{event=\"CreateContainer\",outcome=\"adjusted\"}"
        ) >= 4.0
    );
    task.abort();
}
