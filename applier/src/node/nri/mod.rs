//! The applier as an NRI plugin: when the container runtime creates a container, it asks the
//! plugin, and the plugin answers with the container's cgroup values from the pod's
//! `koordinator.sh/resolved-qos` (checked against the pod spec exactly as the reconcile path
//! checks it), so runc writes them before the container's first instruction. The watch path
//! stays: it applies pod-level and QoS-level values, repairs drift, and is the whole story
//! where the runtime has no NRI (containerd 1.6) or the connection is down.
//!
//! - [`proto`]: the protobuf messages (NRI's and ttrpc's), declared by hand.
//! - [`mux`], [`ttrpc`]: the two framings on the socket (pure).
//! - [`conn`]: one connection: ttrpc server and client over the multiplexer (IO).
//! - [`adjust`], [`decide`]: a container's values -> OCI resources, and why not (pure).
//! - [`plugin`]: the answers; [`link`]: what the plugin and the watch share.
//! - this file: the settings, [`probe_files`] and [`start`]: connect, register, reconnect with
//!   backoff when the runtime restarts; `auto` waits for a socket that is not there yet.
//! - [`NriPlugin`]: the node feature of `run` that starts it and hands the watch its link.
//!
//! Choices and their reasons: docs/decisions.md, "NRI plugin".

pub mod adjust;
pub mod conn;
pub mod decide;
mod feature;
pub mod link;
pub mod metrics;
pub mod mux;
pub mod plugin;
pub mod proto;
pub mod ttrpc;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use adjust::NodeFiles;
pub use feature::NriPlugin;
use link::Link;

use koord_translator::cgroup::CgroupVersion;
use koord_translator::cgroup::layout::Layout;

/// The plugin's name as the runtime logs it.
pub const PLUGIN_NAME: &str = "koord-applier";
/// The NRI API this plugin speaks (the module its messages follow).
pub const NRI_VERSION: &str = "v0.12.3";

/// `--nri`: whether the applier registers with the runtime's NRI socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NriMode {
    /// Register when the socket is there (waiting for it if not); watch path only meanwhile.
    Auto,
    /// Never: the watch path alone.
    Off,
}

/// Settings of the NRI plugin (`--nri`, `--nri-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: NriMode,
    pub socket: PathBuf,
    pub plugin_index: String,
    pub answer_deadline: Duration,
    pub pod_wait: Duration,
}

impl Default for Settings {
    /// Off (a `RunConfig` built in code starts no plugin unless asked).
    fn default() -> Self {
        Self {
            mode: NriMode::Off,
            socket: PathBuf::from("/var/run/nri/nri.sock"),
            plugin_index: "50".to_owned(),
            answer_deadline: Duration::from_millis(500),
            pod_wait: Duration::from_millis(250),
        }
    }
}

/// Which of the files the plugin may set exist on this node, read from `kubepods` (its
/// container cgroups have the same controllers). v1: whether `memory.memsw.limit_in_bytes`
/// exists.
pub fn probe_files(layout: &Layout) -> NodeFiles {
    let rel = layout.kubepods_dir();
    let exists = |ctrl, file: &str| layout.dir(&rel, ctrl).is_ok_and(|d| d.join(file).exists());
    match layout.version {
        CgroupVersion::V2 => NodeFiles {
            v2: NodeFiles::v2_candidates()
                .filter(|f| exists(koord_translator::cgroup::Controller::Memory, f))
                .collect(),
            v1_memsw: false,
        },
        CgroupVersion::V1 => NodeFiles {
            v2: Default::default(),
            v1_memsw: exists(
                koord_translator::cgroup::Controller::Memory,
                adjust::V1_MEMSW,
            ),
        },
    }
}

/// First and longest pause between connection attempts.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(250);
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How long registration and configuration may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause after a failed attempt, given the previous one (`None` after a success).
pub fn next_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(BACKOFF_FIRST, |p| (p * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX))
}

/// Starts the plugin's connection loop (`None` when `--nri=off`).
pub fn start(link: Arc<Link>, pods: Store<Pod>, settings: Settings) -> Option<JoinHandle<()>> {
    if settings.mode == NriMode::Off {
        tracing::info!(
            "NRI off (--nri=off): container values are applied by the watch path after the container starts"
        );
        return None;
    }
    let span = tracing::info_span!("nri", socket = %settings.socket.display());
    Some(tokio::spawn(
        connection_loop(link, pods, settings).instrument(span),
    ))
}

async fn connection_loop(link: Arc<Link>, pods: Store<Pod>, settings: Settings) {
    let mut backoff: Option<Duration> = None;
    let mut said_absent = false;
    loop {
        match UnixStream::connect(&settings.socket).await {
            Err(e) => {
                if !said_absent {
                    tracing::info!(error = %e, "no NRI socket to connect to: watch mode (values applied after the container starts); connecting when it appears");
                    said_absent = true;
                }
            }
            Ok(stream) => {
                said_absent = false;
                match session(&link, &pods, &settings, stream).await {
                    Ok(why) => {
                        tracing::warn!(reason = %why, "NRI connection lost: watch mode until it is back");
                        count(&link, "lost");
                        backoff = None;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "NRI registration failed; retrying");
                        count(&link, "failed");
                    }
                }
            }
        }
        let pause = next_backoff(backoff);
        backoff = Some(pause);
        tokio::time::sleep(pause).await;
    }
}

fn count(link: &Link, result: &str) {
    if let Some(m) = &link.metrics {
        m.connections.with_label_values(&[result]).inc();
    }
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("RegisterPlugin: {0}")]
    Register(#[from] conn::CallError),
    #[error("the runtime did not configure the plugin within {REGISTER_TIMEOUT:?}")]
    NotConfigured,
    #[error("the connection ended during registration: {0}")]
    Ended(conn::ConnError),
}

/// One connection: register, wait for `Configure`, serve until it ends.
async fn session(
    link: &Arc<Link>,
    pods: &Store<Pod>,
    settings: &Settings,
    stream: UnixStream,
) -> Result<conn::ConnError, SessionError> {
    let plugin = Arc::new(plugin::Plugin::new(
        link.clone(),
        pods.clone(),
        settings.clone(),
    ));
    let (client, run) = conn::start(stream, plugin.clone());
    let mut run = std::pin::pin!(run);
    let register = async {
        let req = proto::RegisterPluginRequest {
            plugin_name: PLUGIN_NAME.to_owned(),
            plugin_idx: settings.plugin_index.clone(),
            nri_version: NRI_VERSION.to_owned(),
        };
        client
            .call::<proto::Empty>(
                proto::service::RUNTIME,
                "RegisterPlugin",
                &req,
                REGISTER_TIMEOUT,
            )
            .await?;
        tokio::time::timeout(REGISTER_TIMEOUT, plugin.configured.notified())
            .await
            .map_err(|_| SessionError::NotConfigured)
    };
    tokio::select! {
        r = register => r?,
        why = &mut run => return Err(SessionError::Ended(why)),
    }
    let (runtime, version) = plugin
        .runtime
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    link.connect(client);
    count(link, "registered");
    if let Some(m) = &link.metrics {
        m.runtime.with_label_values(&[&runtime, &version]).set(1);
    }
    tracing::info!(%runtime, %version, index = %settings.plugin_index, files = ?link.decider.files, "NRI mode: registered; container values are set at creation, the watch path repairs drift and applies pod-level values");
    let why = run.await;
    link.disconnect();
    Ok(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let mut b = None;
        let mut seen = Vec::new();
        for _ in 0..8 {
            let p = next_backoff(b);
            seen.push(p.as_millis());
            b = Some(p);
        }
        assert_eq!(seen, [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
    }
}
