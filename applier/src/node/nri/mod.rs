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
//! - this file: the flags, [`probe_files`] and [`start`]: connect, register, reconnect with
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

/// Flags of `run` for the NRI plugin (flattened into its arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct NriArgs {
    /// Set container values at creation through the runtime's NRI socket: `auto` (when the
    /// socket exists) or `off`. The watch path runs either way.
    #[arg(long = "nri", env = "KOORD_NRI", value_enum, default_value = "auto")]
    pub nri: NriMode,
    /// The runtime's NRI socket.
    #[arg(
        long,
        env = "KOORD_NRI_SOCKET",
        default_value = "/var/run/nri/nri.sock"
    )]
    pub nri_socket: PathBuf,
    /// The plugin's index (two digits): the runtime calls plugins in ascending order.
    #[arg(long, env = "KOORD_NRI_PLUGIN_INDEX", default_value = "50")]
    pub nri_plugin_index: String,
    /// The longest an answer may take (also kept under half the runtime's request timeout);
    /// past it the container is created without adjustment.
    #[arg(long, env = "KOORD_NRI_ANSWER_DEADLINE_MS", default_value_t = 500)]
    pub nri_answer_deadline_ms: u64,
    /// How long a container creation waits for its pod to reach the watch before it is
    /// answered "no adjustment" (the watch path then applies it).
    #[arg(long, env = "KOORD_NRI_POD_WAIT_MS", default_value_t = 250)]
    pub nri_pod_wait_ms: u64,
}

/// Settings of the NRI plugin.
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--nri-plugin-index {0:?} must be two digits (00..=99)")]
    Index(String),
    #[error("--nri-answer-deadline-ms must be in 10..=1900 (the runtime waits 2000 ms by default)")]
    Deadline,
    #[error("--nri-pod-wait-ms must be in 0..=1000")]
    PodWait,
}

impl TryFrom<&NriArgs> for Settings {
    type Error = SettingsError;
    fn try_from(a: &NriArgs) -> Result<Self, SettingsError> {
        let idx = &a.nri_plugin_index;
        if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SettingsError::Index(idx.clone()));
        }
        if !(10..=1900).contains(&a.nri_answer_deadline_ms) {
            return Err(SettingsError::Deadline);
        }
        if a.nri_pod_wait_ms > 1000 {
            return Err(SettingsError::PodWait);
        }
        Ok(Self {
            mode: a.nri,
            socket: a.nri_socket.clone(),
            plugin_index: idx.clone(),
            answer_deadline: Duration::from_millis(a.nri_answer_deadline_ms),
            pod_wait: Duration::from_millis(a.nri_pod_wait_ms),
        })
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

    #[test]
    fn settings_table() {
        let args = |idx: &str, deadline: u64, wait: u64| NriArgs {
            nri: NriMode::Auto,
            nri_socket: "/s".into(),
            nri_plugin_index: idx.into(),
            nri_answer_deadline_ms: deadline,
            nri_pod_wait_ms: wait,
        };
        assert!(Settings::try_from(&args("50", 500, 250)).is_ok());
        assert_eq!(
            Settings::try_from(&args("5", 500, 250)),
            Err(SettingsError::Index("5".into()))
        );
        assert_eq!(
            Settings::try_from(&args("a1", 500, 250)),
            Err(SettingsError::Index("a1".into()))
        );
        assert_eq!(
            Settings::try_from(&args("50", 2000, 250)),
            Err(SettingsError::Deadline)
        );
        assert_eq!(
            Settings::try_from(&args("50", 500, 5000)),
            Err(SettingsError::PodWait)
        );
    }
}
