//! `run` with the PSI collector on, against an in-process fake API server: the watch's pods
//! get series on `/metrics`, and a DELETED watch event removes them.

use crate::common;

use std::time::Duration;

use common::collectors::{cid, pod, series};
use common::fake_api::{FakeApi, Serves};
use koord_applier::config::Config;
use koord_applier::node::collectors::CollectorConfig;
use koord_translator::cgroup::CgroupDriver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const FULL: &str = "some avg10=1.50 avg60=2.25 avg300=3.00 total=100\nfull avg10=0.50 avg60=0.75 avg300=1.00 total=50\n";

async fn scrape(addr: std::net::SocketAddr) -> String {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exposes_psi_and_drops_deleted_pods() {
    psi_run("", "/").await;
}

/// The same below a kubelet with `cgroupRoot: /kubelet`, detected: the collector reads the
/// pods' pressure files under `kubelet/kubepods`, and the info metric says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_follows_a_detected_kubelet_cgroup_root() {
    psi_run("kubelet/", "/kubelet").await;
}

/// `run` on a cgroupfs v2 tree whose `kubepods` is below `prefix` (the kubelet's cgroupRoot
/// `kubelet_root`, left to detection).
async fn psi_run(prefix: &str, kubelet_root: &str) {
    koord_runtime::install_crypto_provider();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = cid(0xa);
    let pod_dir = tmp
        .path()
        .join(format!("{prefix}kubepods/burstable/pod{UID}"));
    for d in [pod_dir.clone(), pod_dir.join(&a)] {
        std::fs::create_dir_all(&d).expect("mkdir");
        for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
            std::fs::write(d.join(f), FULL).expect("write");
        }
    }
    let p = pod(UID, "web-0", &[("app", &a)], "100");
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let config = Config {
        collectors: CollectorConfig {
            psi: true,
            psi_interval: Duration::from_secs(1),
            ..CollectorConfig::disabled()
        },
        ..common::run_config(tmp.path(), CgroupDriver::Cgroupfs)
    };
    let run = common::watch_settings("node-a", addr);
    // The fake API server: lists return the pod until it is deleted, then nothing; the first
    // watch is answered with DELETED when the test says so, later watches stay open.
    let mut api = FakeApi::start(Serves {
        pods: vec![serde_json::to_value(&p).expect("pod json")],
        ..Serves::default()
    });
    let applier = tokio::spawn(koord_applier::cmd::run::run_with_client(
        config,
        run,
        api.client.clone(),
    ));

    let wait_for = |want: bool| async move {
        for _ in 0..100 {
            let text = scrape(addr).await;
            let n = series(&text.replace("\r\n", "\n"), "koordlet_pod_psi{").len()
                + series(&text.replace("\r\n", "\n"), "koordlet_container_psi{").len();
            if (n == 36) == want && (want || (text.contains("200 OK") && n == 0)) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("metrics never reached the expected state (want series: {want})");
    };
    let text = wait_for(true).await;
    assert!(text.contains(&format!("koordlet_container_psi{{container_id=\"containerd://{a}\",container_name=\"app\",cpu_full_supported=\"true\",node=\"node-a\",pod_name=\"web-0\",pod_namespace=\"shop\",pod_uid=\"{UID}\",psi_degree=\"some\",psi_precision=\"avg10\",psi_resource_type=\"cpu\"}} 1.5")), "\n{text}");
    assert!(
        text.contains("koord_applier_pods_managed"),
        "collector families share the applier's registry"
    );
    let info = format!(
        "koord_applier_cgroup_layout_info{{driver=\"cgroupfs\",kubelet_cgroup_root=\"{kubelet_root}\",version=\"v2\"}} 1"
    );
    assert!(text.contains(&info), "{info}\n{text}");

    api.delete_pods();
    wait_for(false).await;
    applier.abort();
}
