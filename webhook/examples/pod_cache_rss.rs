//! The memory of the alternative the re-resolver does not use: every pod of a namespace held in
//! a kube reflector (full `k8s_openapi::Pod` objects), as a watch-based re-resolver would
//! keep them. Prints the pod count and the process's VmRSS/VmHWM once the first list is in the
//! store. Run by the e2e memory scenario (tests/e2e/reresolve_e2e.py, KOORD_E2E_MEMORY=1)
//! beside the webhook's own figures:
//!
//! ```text
//! KUBECONFIG=... cargo run --release -p koord-webhook --example pod_cache_rss -- <namespace>
//! ```

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, Event, watcher};

/// The webhook's allocator, so the figures compare.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn vm(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_owned()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    koord_runtime::install_crypto_provider();
    let namespace = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: pod_cache_rss <namespace>"))?;
    let client = kube::Client::try_default().await?;
    let base = vm("VmRSS:");
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let (store, writer) = reflector::store();
    let mut stream = std::pin::pin!(reflector(writer, watcher(api, watcher::Config::default())));
    while let Some(event) = stream.next().await {
        if let Event::InitDone = event? {
            break;
        }
    }
    println!(
        "pods={} base_rss_kib={base} rss_kib={} hwm_kib={}",
        store.state().len(),
        vm("VmRSS:"),
        vm("VmHWM:")
    );
    Ok(())
}
