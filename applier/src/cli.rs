//! The command line, parse layer only: flag names, environment variables, defaults and help
//! texts. Every flag also reads an environment variable. `crate::config` turns the parsed
//! flags into the one [`crate::config::Config`] the commands (and the tests) use. Each feature
//! owns its flags (`numa::LocalityArgs`, `collectors::CollectorArgs`,
//! `colocation::ColocationArgs`), flattened in here.

use std::path::PathBuf;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use koord_runtime::LogFormat;

use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::systemd::SystemdDbus;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

use crate::go_flags::{FlagKind, FlagSpec, GoFlagError};

#[derive(Debug, Parser)]
#[command(
    name = "koord-applier",
    version,
    about = "Applies koordinator.sh/resolved-qos to the cgroups of this node",
    // A flag given twice: the last one wins, as with Go's flag package (a DaemonSet's args
    // may carry a --feature-gates from an overlay and another added by hand).
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Where the cgroup hierarchy is mounted (v1: the directory holding memory/ and cpu/).
    #[arg(
        long,
        env = "KOORD_CGROUP_ROOT",
        default_value = "/sys/fs/cgroup",
        global = true
    )]
    pub cgroup_root: PathBuf,
    /// Force the cgroup version instead of detecting it (statfs magic of the root).
    #[arg(long, env = "KOORD_CGROUP_VERSION", value_enum, global = true)]
    pub cgroup_version: Option<CgroupVersion>,
    /// Force the kubelet cgroup driver instead of detecting it from kubepods[.slice].
    #[arg(long, env = "KOORD_CGROUP_DRIVER", value_enum, global = true)]
    pub cgroup_driver: Option<CgroupDriver>,
    /// The kubelet's `cgroupRoot` as its config says it (`/`, `/kubelet` on kind), whatever the
    /// driver. Default: detected (`/` when `kubepods[.slice]` is at the root, else the only
    /// kubepods tree one or two levels down; two or more refuse to start).
    #[arg(long, env = "KOORD_KUBELET_CGROUP_ROOT", global = true)]
    pub kubelet_cgroup_root: Option<KubeletRoot>,
    /// The host's /proc (for the locality and collector features).
    #[arg(long, env = "KOORD_PROC_ROOT", default_value = "/proc", global = true)]
    pub proc_root: PathBuf,
    /// The host's /sys (for the locality and collector features).
    #[arg(long, env = "KOORD_SYS_ROOT", default_value = "/sys", global = true)]
    pub sys_root: PathBuf,
    /// Memory locality: the migration rate.
    #[command(flatten)]
    pub locality: crate::node::numa::LocalityArgs,
    /// Without Alibaba group identity (`cpu.bvt_warp_ns`), make BE pods SCHED_IDLE cgroups
    /// (`cpu.idle = 1`, Linux 5.15+). Locks the pod's `cpu.shares` (see docs/cpu-qos.md).
    #[arg(long, env = "KOORD_CPU_IDLE_FALLBACK", global = true)]
    pub cpu_idle_fallback: bool,
    /// With `--cpu-idle-fallback`, also make `kubepods/besteffort` (and a QoS cgroup whose pods
    /// are all BE) idle. Off by default: the kubelet's own `cpu.weight`/`cpu.shares` write on
    /// an idle QoS cgroup fails and it then skips the rest of its QoS update.
    #[arg(long, env = "KOORD_CPU_IDLE_QOS_PARENTS", global = true)]
    pub cpu_idle_qos_parents: bool,
    /// Where resctrl is mounted (L3 CAT / MBA class groups); absent or unsupported = off.
    #[arg(
        long,
        env = "KOORD_RESCTRL_ROOT",
        default_value = "/sys/fs/resctrl",
        global = true
    )]
    pub resctrl_root: PathBuf,
    /// Read and compare, print the plan, write nothing.
    #[arg(long, env = "KOORD_DRY_RUN", global = true)]
    pub dry_run: bool,
    #[arg(
        long,
        env = "KOORD_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// The Performance Collector (PSI, CPI): feature gates and intervals.
    #[command(flatten)]
    pub collectors: crate::node::collectors::CollectorArgs,
    /// Hierarchical memory protection of `kubepods` and the QoS-class directories.
    #[command(flatten)]
    pub ancestors: crate::node::ancestors::AncestorArgs,
    /// The values of systemd units, set through systemd on its driver.
    #[command(flatten)]
    pub systemd: SystemdArgs,
}

/// Flags of the systemd writes (global: `run` and `once`).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SystemdArgs {
    /// On the kubelet's systemd driver (cgroup v2), set the values of its slices and scopes as
    /// systemd unit properties (SetUnitProperties), so that systemd keeps them instead of
    /// resetting them at its next re-apply: `auto` (when systemd's socket exists), `on` (wait
    /// for it), `off` (cgroup files only).
    #[arg(
        long = "systemd-dbus",
        env = "KOORD_SYSTEMD_DBUS",
        value_enum,
        default_value = "auto",
        global = true
    )]
    pub systemd_dbus: SystemdDbus,
    /// systemd's private D-Bus socket (the host's `/run/systemd/private`).
    #[arg(
        long,
        env = "KOORD_SYSTEMD_SOCKET",
        default_value = "/run/systemd/private",
        global = true
    )]
    pub systemd_socket: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch this node's pods and keep their cgroups in line with their annotation.
    Run(Box<RunArgs>),
    /// Apply one pod manifest (with status.containerStatuses) and print a JSON report.
    Once(OnceArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's name (downward API `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Re-apply every pod this often, to repair values changed behind our back.
    #[arg(long, env = "KOORD_RESYNC_SECONDS", default_value_t = 60)]
    pub resync_seconds: u64,
    /// Re-read the `memory.min`/`memory.low` the ancestors pass left on `kubepods` and the
    /// QoS-class cgroups this often, and run the pass at once when one has moved (the
    /// kubelet zeroes them when it starts, a daemon-reload re-applies systemd's values):
    /// milliseconds, 0 = only at the resync.
    #[arg(long, env = "KOORD_ANCESTORS_CHECK_MS", default_value_t = 250)]
    pub ancestors_check_ms: u64,
    /// Address of /metrics, /healthz and /readyz (`:9316` = all interfaces).
    #[arg(long, env = "KOORD_METRICS_ADDR", default_value = ":9316")]
    pub metrics_addr: String,
    /// An Event identical to one already posted for the pod is dropped for this long.
    #[arg(long, env = "KOORD_EVENT_WINDOW_SECONDS", default_value_t = 600)]
    pub event_window_seconds: u64,
    #[command(flatten)]
    pub colocation: crate::node::colocation::ColocationArgs,
    /// The metrics endpoint's connection cap and timeouts.
    #[command(flatten)]
    pub endpoint: crate::server::EndpointArgs,
    /// The NRI plugin: container values set at creation.
    #[command(flatten)]
    pub nri: crate::node::nri::NriArgs,
    /// Async reclaim emulated with `memory.reclaim` where the kernel lacks `memory.wmark_*`.
    #[command(flatten)]
    pub reclaim: crate::node::reclaim::ReclaimArgs,
    /// The proactive reclaim loop (`memory.reclaim` paced by the containers' memory stall).
    #[command(flatten)]
    pub proactive: crate::node::proactive::ProactiveArgs,
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    /// Pod manifest, YAML or JSON.
    #[arg(short = 'f', long = "filename", env = "KOORD_POD_FILE")]
    pub file: PathBuf,
    /// Instead of applying: run one PSI round and one CPI window for the pod (or every pod of
    /// a List) and print the Prometheus text. Gates not named in --feature-gates are on.
    #[arg(long, env = "KOORD_COLLECT")]
    pub collect: bool,
    /// With --collect: keep collecting on the intervals and serve /metrics at this address
    /// until SIGTERM (benchmarks and demos without an API server).
    #[arg(long, requires = "collect", hide = true)]
    pub collect_serve: Option<String>,
    /// Add a `timings` section to the report: where the command and the memory locality pass
    /// spent their time, in microseconds.
    #[arg(long, env = "KOORD_ONCE_TIMINGS", conflicts_with = "collect")]
    pub timings: bool,
}

/// Every long flag of every command, for [`crate::go_flags::normalize`].
pub fn flag_specs() -> Vec<FlagSpec> {
    fn collect(cmd: &clap::Command, out: &mut Vec<FlagSpec>) {
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if out.iter().any(|s| s.name == long) {
                continue;
            }
            let kind = if arg.get_action().takes_values() {
                FlagKind::Value
            } else {
                FlagKind::Bool
            };
            out.push(FlagSpec::new(long, kind));
        }
        for sub in cmd.get_subcommands() {
            collect(sub, out);
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, &mut out);
    out
}

/// The command line as koordlet users write it (`-feature-gates=...`, see
/// [`crate::go_flags`]) rewritten for clap; unknown long flags are refused by the name given.
pub fn normalize_args(
    args: Vec<std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, GoFlagError> {
    crate::go_flags::normalize(args, &flag_specs())
}
