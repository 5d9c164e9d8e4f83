//! The command line, parse layer only: flag names, environment variables, defaults and help
//! texts. Every flag also reads an environment variable. `crate::config` turns the parsed
//! flags into the one [`crate::config::Config`] the commands (and the tests) use; nothing else
//! reads these structs. A feature's flags sit together under a `// feature` line; the order of
//! the fields is the order `--help` lists them in.

use std::path::PathBuf;

use clap::{ArgAction, Args, CommandFactory as _, Parser, Subcommand};
use koord_runtime::LogFormat;

use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::systemd::SystemdDbus;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

use crate::go_flags::{FlagKind, FlagSpec, GoFlagError};
use crate::node::ancestors::KubeletMemoryQos;
use crate::node::nri::NriMode;

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

    // Memory locality: the migration rate.
    /// Memory locality: move pages with move_pages(2) in batches, at most this many pages per
    /// second per process (0 = off: one migrate_pages(2) per process).
    #[arg(
        long,
        env = "KOORD_LOCALITY_MAX_PAGES_PER_SECOND",
        default_value_t = 0,
        global = true
    )]
    pub locality_max_pages_per_second: u64,
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

    // The Performance Collector (PSI, CPI): feature gates and intervals.
    /// Feature gates, `Name=bool,...`: `CPICollector`, `PSICollector` (both off by default;
    /// on by default for `once --collect`). koordlet's other gates (`BECPUEvict`,
    /// `CgroupReconcile`, `Libpfm4`, ...) are accepted with a warning and have no effect.
    #[arg(long, env = "KOORD_FEATURE_GATES", default_value = "", global = true)]
    pub feature_gates: String,
    /// Seconds between two CPI windows.
    #[arg(
        long,
        env = "KOORD_CPI_COLLECTOR_INTERVAL_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub cpi_collector_interval_seconds: u64,
    /// Seconds the cycles/instructions counters run in each CPI window.
    #[arg(
        long,
        env = "KOORD_COLLECT_CPI_TIMEWINDOW_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub collect_cpi_timewindow_seconds: u64,
    /// Seconds between two PSI rounds.
    #[arg(
        long,
        env = "KOORD_PSI_COLLECTOR_INTERVAL_SECONDS",
        default_value_t = 10,
        global = true
    )]
    pub psi_collector_interval_seconds: u64,
    /// Count task-clock/cpu-clock in place of cycles/instructions (the values are then
    /// nanoseconds): exercises the CPI path on machines without a PMU, for benchmarks only.
    #[arg(long, env = "KOORD_CPI_SOFTWARE_EVENTS", hide = true, global = true)]
    pub cpi_software_events: bool,

    // Hierarchical memory protection of `kubepods` and the QoS-class directories.
    /// Set `memory.min`/`memory.low` of `kubepods` and of the QoS-class directories to the
    /// sum of their direct children, so pod-level protection takes effect (the kernel caps it
    /// by every ancestor's). `--protect-ancestors=false` leaves them alone.
    #[arg(
        long,
        env = "KOORD_PROTECT_ANCESTORS",
        action = ArgAction::Set,
        default_value_t = true,
        global = true
    )]
    pub protect_ancestors: bool,
    /// What the kubelet's own Memory QoS (KEP-2570) writes on `kubepods` and
    /// `kubepods/burstable`; the files it rewrites are the kubelet's and never written here.
    /// `off` (gate off, or `memoryReservationPolicy: None`, the 1.37 default), `alpha` (the
    /// 1.22-1.35 alpha with the gate on: both `memory.min`), `tiered` (1.36+
    /// `TieredReservation`: `kubepods` `memory.min`/`memory.low`, `burstable` `memory.low`).
    /// The bare flag and `true` mean `tiered`, `false` means `off`.
    #[arg(
        long,
        env = "KOORD_KUBELET_MEMORY_QOS",
        global = true,
        value_enum,
        default_value_t = KubeletMemoryQos::Off,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "tiered"
    )]
    pub kubelet_memory_qos: KubeletMemoryQos,

    // The values of systemd units, set through systemd on its driver.
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

    // Batch capacity and BE suppression.
    /// Run the colocation loop (the ConfigMap's `enable` flags still decide what it does).
    #[arg(long = "colocation", env = "KOORD_COLOCATION", default_value_t = true, action = ArgAction::Set)]
    pub colocation: bool,
    /// Namespace of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAMESPACE", default_value = koord_api::keys::CONFIG_NAMESPACE)]
    pub slo_config_namespace: String,
    /// Name of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAME", default_value = koord_api::keys::CLUSTER_CONFIGMAP)]
    pub slo_config_name: String,
    /// Usage is sampled and BE suppression recomputed this often.
    #[arg(long, env = "KOORD_COLOCATION_SAMPLE_SECONDS", default_value_t = 2.0)]
    pub colocation_sample_seconds: f64,
    /// The batch capacity is recomputed (and the Node patched if needed) this often.
    #[arg(long, env = "KOORD_COLOCATION_REPORT_SECONDS", default_value_t = 60.0)]
    pub colocation_report_seconds: f64,
    /// BE pods always keep at least this many CPUs (fractions allowed for cfsQuota; cpuset
    /// rounds up), or every CPU the node has when it has fewer.
    #[arg(long, env = "KOORD_BE_SUPPRESS_MIN_CPUS", default_value_t = 2.0)]
    pub be_suppress_min_cpus: f64,

    // The metrics endpoint's connection cap and timeouts.
    /// Connections the metrics endpoint holds open at once. At the cap a new connection
    /// closes the oldest one whose request has not arrived yet, of the source address holding
    /// the most such connections; at most a quarter of the
    /// file descriptors the applier keeps in reserve (256 with a limit above 2048).
    #[arg(long, env = "KOORD_METRICS_MAX_CONNECTIONS", default_value_t = 64)]
    pub metrics_max_connections: usize,
    /// A connection whose request head has not arrived this long after it opened is closed
    /// (silent clients, heads sent a byte at a time).
    #[arg(
        long,
        env = "KOORD_METRICS_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 5
    )]
    pub metrics_header_read_timeout_seconds: u64,
    /// Once the head is in, the answer must be written within this (a client that does not
    /// read it is closed).
    #[arg(
        long,
        env = "KOORD_METRICS_WRITE_TIMEOUT_SECONDS",
        default_value_t = 10
    )]
    pub metrics_write_timeout_seconds: u64,

    // The NRI plugin: container values set at creation.
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

    // Async reclaim emulated with `memory.reclaim` where the kernel lacks `memory.wmark_*`.
    /// Where the kernel has no `memory.wmark_*` (every mainline kernel) but has
    /// `memory.reclaim` (5.19+), keep each container whose annotation asks for async reclaim
    /// (`memory.wmark_ratio` > 0) below its `wmark_high` by writing `memory.reclaim`, as the
    /// Alibaba kernel's background worker does. `--async-reclaim=false` reports the knob
    /// unsupported instead.
    #[arg(
        long,
        env = "KOORD_ASYNC_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub async_reclaim: bool,
    /// Where the kernel has no `memory.wmark_min_adj` but has `memory.reclaim`: when the node's
    /// free memory nears the kernel's watermarks, reclaim from the containers whose annotation
    /// has a positive `memory.wmark_min_adj` (BE, 50 by default) before the kernel's global
    /// reclaim reaches the others (LS). `--be-first-reclaim=false` reports the knob
    /// unsupported instead.
    #[arg(
        long,
        env = "KOORD_BE_FIRST_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub be_first_reclaim: bool,
    /// With BE-first on: while the node's free memory is below the Alibaba kernel's throttle
    /// point for the adjustment (`min + (low - min) * adj / 100` of the zones' watermarks),
    /// also hold each such container's growth with `memory.high` at its usage (never below 32
    /// MiB or its `memory.min`), as that kernel throttles those allocations; released with the
    /// value before put back once free memory is at the `high` watermark again.
    /// `--be-first-throttle=false` only reclaims.
    #[arg(
        long,
        env = "KOORD_BE_FIRST_THROTTLE",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub be_first_throttle: bool,
    /// How often each such container's `memory.current` (and the node's `/proc/zoneinfo`) is
    /// read (milliseconds).
    #[arg(long, env = "KOORD_ASYNC_RECLAIM_INTERVAL_MS", default_value_t = 100)]
    pub async_reclaim_interval_ms: u64,
    /// The reclaim worker's CPU budget (both emulations): percent of one core, per second
    /// (1..=100). Reclaims
    /// due past it wait for the next second and are counted.
    #[arg(long, env = "KOORD_ASYNC_RECLAIM_CPU_PERCENT", default_value_t = 5)]
    pub async_reclaim_cpu_percent: u32,

    // The proactive reclaim loop (`memory.reclaim` paced by the containers' memory stall).
    /// Run the proactive reclaim loop (TMO/senpai-style: `memory.reclaim` while the
    /// container's `memory.pressure` stall stays under its target, never below its floor) for
    /// the containers whose annotation enables it (`proactiveReclaim.enabled`). Needs cgroup
    /// v2 with `memory.reclaim` (Linux 5.19+) and PSI; elsewhere each such pod gets an Event
    /// and nothing is done. `--proactive-reclaim=false` never runs it.
    #[arg(
        long,
        env = "KOORD_PROACTIVE_RECLAIM",
        action = ArgAction::Set,
        default_value_t = true
    )]
    pub proactive_reclaim: bool,
    /// The longest one tick of the loop may spend writing `memory.reclaim`, all containers
    /// together (milliseconds, 1..=1000). Reclaims due past it wait for their next interval
    /// and are counted.
    #[arg(
        long,
        env = "KOORD_PROACTIVE_RECLAIM_WRITE_BUDGET_MS",
        default_value_t = 50
    )]
    pub proactive_reclaim_write_budget_ms: u64,

    // Swap for BE containers.
    /// Let each BE pod's containers (label `koordinator.sh/qosClass: BE`) swap up to this
    /// share of their memory limit, percent (0..=100; 0 = off, the kubelet's
    /// `memory.swap.max` stands). For nodes with swap: the kubelet's `LimitedSwap` gives
    /// BestEffort containers, and so Koordinator's batch-memory BE pods, no swap. Needs cgroup
    /// v2; every grant is put back when the applier exits.
    #[arg(long, env = "KOORD_BE_SWAP_PERCENT", default_value_t = 0)]
    pub be_swap_percent: u32,
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
