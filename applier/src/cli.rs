//! Command line: every flag also reads an environment variable. [`Config::from`] and
//! [`RunConfig::try_from`] turn the parsed flags into the plain settings the commands (and the
//! tests) use. Each feature owns its flags (`numa::LocalityArgs`, `collectors::CollectorArgs`,
//! `colocation::ColocationArgs`), flattened in here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
pub use koord_runtime::LogFormat;

use koord_translator::cgroup::detect::{self, DetectError, detect_version};
use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::systemd::{self, SystemdDbus};
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

/// Settings shared by every command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub cgroup_root: PathBuf,
    pub cgroup_version: Option<CgroupVersion>,
    pub cgroup_driver: Option<CgroupDriver>,
    /// `--kubelet-cgroup-root`; `None` = detect.
    pub kubelet_cgroup_root: Option<KubeletRoot>,
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub locality: crate::node::numa::LocalityConfig,
    pub dry_run: bool,
    pub log_format: LogFormat,
    pub collectors: crate::node::collectors::CollectorArgs,
    pub cpu_idle_fallback: bool,
    pub cpu_idle_qos_parents: bool,
    pub resctrl_root: PathBuf,
    /// `--protect-ancestors`, `--kubelet-memory-qos`.
    pub ancestors: crate::node::ancestors::AncestorSettings,
    /// `--systemd-dbus`, `--systemd-socket`.
    pub systemd: systemd::Settings,
}

/// Settings of `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    pub node_name: String,
    pub resync: Duration,
    /// `--ancestors-check-ms`; `None` = off.
    pub ancestors_check: Option<Duration>,
    pub metrics_addr: SocketAddr,
    pub event_window: Duration,
    /// Batch capacity and BE suppression (`crate::node::colocation`); `Default` = off.
    pub colocation: crate::node::colocation::Settings,
    /// The metrics endpoint's connection cap and timeouts.
    pub endpoint: crate::server::EndpointSettings,
    /// The NRI plugin (`crate::node::nri`); `Default` = off.
    pub nri: crate::node::nri::Settings,
    /// The async reclaim emulation (`crate::node::reclaim`); `Default` = off.
    pub reclaim: crate::node::reclaim::Settings,
    /// The proactive reclaim loop (`crate::node::proactive`); `Default` = off.
    pub proactive: crate::node::proactive::Settings,
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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--metrics-addr {0:?} is not host:port or :port")]
    Addr(String),
    #[error("--resync-seconds must be at least 1")]
    Resync,
    #[error(transparent)]
    Detect(#[from] DetectError),
    #[error(transparent)]
    Colocation(#[from] crate::node::colocation::SettingsError),
    #[error(transparent)]
    Endpoint(#[from] crate::server::EndpointError),
    #[error(transparent)]
    Nri(#[from] crate::node::nri::SettingsError),
    #[error(transparent)]
    Reclaim(#[from] crate::node::reclaim::SettingsError),
    #[error(transparent)]
    Proactive(#[from] crate::node::proactive::SettingsError),
}

/// `:9316` -> `0.0.0.0:9316`, else a plain socket address.
pub fn parse_addr(s: &str) -> Result<SocketAddr, ConfigError> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse().map_err(|_| ConfigError::Addr(s.to_owned()))
}

impl Config {
    /// The layout: forced values win, else detection; a node whose kubelet has not made its
    /// cgroups yet falls back to cgroupfs (the kubelet's default driver) at cgroupRoot `/`.
    pub fn layout(&self) -> Result<Layout, ConfigError> {
        let version = match self.cgroup_version {
            Some(v) => v,
            None => detect_version(&self.cgroup_root)?,
        };
        let base = detect::kubepods_base(&self.cgroup_root, version);
        let (driver, kubelet_root) = match &self.kubelet_cgroup_root {
            Some(kr) => {
                let driver = self.cgroup_driver.or_else(|| detect::driver_at(&base, kr)).unwrap_or_else(|| {
                    tracing::warn!(base = %base.display(), kubelet_cgroup_root = %kr, "no kubepods cgroup below the kubelet cgroup root; assuming the cgroupfs driver");
                    CgroupDriver::Cgroupfs
                });
                (driver, kr.clone())
            }
            None => match detect::choose(&detect::scan_kubepods(&base), self.cgroup_driver)? {
                Some(found) => {
                    tracing::info!(dir = %base.join(&found.dir).display(), driver = %found.driver, kubelet_cgroup_root = %found.kubelet_root, "kubelet cgroup tree detected");
                    (found.driver, found.kubelet_root)
                }
                None => {
                    let driver = self.cgroup_driver.unwrap_or(CgroupDriver::Cgroupfs);
                    tracing::warn!(base = %base.display(), %driver, "no kubepods cgroup found at the root or one or two levels down; assuming cgroupRoot / (set --kubelet-cgroup-root if the kubelet uses another)");
                    (driver, KubeletRoot::top())
                }
            },
        };
        Ok(Layout::new(self.cgroup_root.clone(), version, driver).with_kubelet_root(kubelet_root))
    }
}

impl From<&GlobalArgs> for Config {
    fn from(g: &GlobalArgs) -> Self {
        Config {
            cgroup_root: g.cgroup_root.clone(),
            cgroup_version: g.cgroup_version,
            cgroup_driver: g.cgroup_driver,
            kubelet_cgroup_root: g.kubelet_cgroup_root.clone(),
            proc_root: g.proc_root.clone(),
            sys_root: g.sys_root.clone(),
            locality: crate::node::numa::LocalityConfig::from(&g.locality),
            dry_run: g.dry_run,
            log_format: g.log_format,
            collectors: g.collectors.clone(),
            cpu_idle_fallback: g.cpu_idle_fallback,
            cpu_idle_qos_parents: g.cpu_idle_qos_parents,
            resctrl_root: g.resctrl_root.clone(),
            ancestors: crate::node::ancestors::AncestorSettings::from(&g.ancestors),
            systemd: systemd::Settings {
                mode: g.systemd.systemd_dbus,
                socket: g.systemd.systemd_socket.clone(),
            },
        }
    }
}

impl TryFrom<&RunArgs> for RunConfig {
    type Error = ConfigError;
    fn try_from(a: &RunArgs) -> Result<Self, ConfigError> {
        if a.resync_seconds == 0 {
            return Err(ConfigError::Resync);
        }
        Ok(RunConfig {
            node_name: a.node_name.clone(),
            resync: Duration::from_secs(a.resync_seconds),
            ancestors_check: (a.ancestors_check_ms > 0)
                .then(|| Duration::from_millis(a.ancestors_check_ms)),
            metrics_addr: parse_addr(&a.metrics_addr)?,
            event_window: Duration::from_secs(a.event_window_seconds),
            colocation: crate::node::colocation::Settings::try_from(&a.colocation)?,
            endpoint: crate::server::EndpointSettings::try_from(&a.endpoint)?,
            nri: crate::node::nri::Settings::try_from(&a.nri)?,
            reclaim: crate::node::reclaim::Settings::try_from(&a.reclaim)?,
            proactive: crate::node::proactive::Settings::try_from(&a.proactive)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_and_defaults() {
        let cli = Cli::try_parse_from([
            "koord-applier",
            "run",
            "--node-name",
            "n1",
            "--cgroup-version",
            "v1",
            "--cgroup-driver",
            "systemd",
        ])
        .expect("parses");
        let cfg = Config::from(&cli.global);
        assert_eq!(cfg.cgroup_root, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(
            (cfg.cgroup_version, cfg.cgroup_driver),
            (Some(CgroupVersion::V1), Some(CgroupDriver::Systemd))
        );
        let Command::Run(run) = &cli.command else {
            panic!("run")
        };
        let rc = RunConfig::try_from(run.as_ref()).expect("valid");
        assert_eq!(rc.metrics_addr, "0.0.0.0:9316".parse().expect("addr"));
        assert_eq!(rc.resync, Duration::from_secs(60));
        assert_eq!(rc.endpoint, crate::server::EndpointSettings::default());
        assert!(
            !cfg.cpu_idle_fallback,
            "the cpu.idle fallback is off by default"
        );
        assert_eq!(cfg.resctrl_root, PathBuf::from("/sys/fs/resctrl"));
        let cli = Cli::try_parse_from(["koord-applier", "once", "-f", "pod.yaml", "--dry-run"])
            .expect("parses");
        assert!(cli.global.dry_run);
        assert!(
            Cli::try_parse_from(["koord-applier", "once", "--cgroup-version", "v3", "-f", "x"])
                .is_err()
        );
    }

    #[test]
    fn ancestor_flags() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["koord-applier"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).map(|c| Config::from(&c.global).ancestors)
        };
        let on = crate::node::ancestors::AncestorSettings {
            enabled: true,
            kubelet_memory_qos: crate::node::ancestors::KubeletMemoryQos::Off,
        };
        assert_eq!(parse(&["once", "-f", "p"]).expect("parses"), on);
        let off = crate::node::ancestors::AncestorSettings {
            enabled: false,
            ..on
        };
        // After the subcommand (as the guest test passes it) and before it (global).
        assert_eq!(
            parse(&["once", "--protect-ancestors=false", "-f", "p"]).expect("parses"),
            off
        );
        assert_eq!(
            parse(&["--protect-ancestors", "false", "once", "-f", "p"]).expect("parses"),
            off
        );
        assert_eq!(
            parse(&["once", "--protect-ancestors=true", "-f", "p"]).expect("parses"),
            on
        );
        assert!(parse(&["once", "--protect-ancestors=maybe", "-f", "p"]).is_err());
        assert_eq!(
            parse(&["run", "--node-name", "n", "--kubelet-memory-qos"]).expect("parses"),
            crate::node::ancestors::AncestorSettings {
                kubelet_memory_qos: crate::node::ancestors::KubeletMemoryQos::Tiered,
                ..on
            }
        );
        for (arg, want) in [
            (
                "--kubelet-memory-qos=alpha",
                crate::node::ancestors::KubeletMemoryQos::Alpha,
            ),
            (
                "--kubelet-memory-qos=tiered",
                crate::node::ancestors::KubeletMemoryQos::Tiered,
            ),
            (
                "--kubelet-memory-qos=true",
                crate::node::ancestors::KubeletMemoryQos::Tiered,
            ),
            (
                "--kubelet-memory-qos=false",
                crate::node::ancestors::KubeletMemoryQos::Off,
            ),
            (
                "--kubelet-memory-qos=off",
                crate::node::ancestors::KubeletMemoryQos::Off,
            ),
        ] {
            assert_eq!(
                parse(&["once", arg, "-f", "p"])
                    .expect(arg)
                    .kubelet_memory_qos,
                want,
                "{arg}"
            );
        }
        assert!(parse(&["once", "--kubelet-memory-qos=maybe", "-f", "p"]).is_err());
    }

    #[test]
    fn kubelet_cgroup_root_flag() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["koord-applier", "once", "-f", "p"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).map(|c| Config::from(&c.global).kubelet_cgroup_root)
        };
        assert_eq!(parse(&[]).expect("parses"), None, "detected by default");
        assert_eq!(
            parse(&["--kubelet-cgroup-root", "/kubelet"]).expect("parses"),
            Some(KubeletRoot::parse("/kubelet").expect("root"))
        );
        assert_eq!(
            parse(&["--kubelet-cgroup-root=/"]).expect("parses"),
            Some(KubeletRoot::top())
        );
        for bad in ["kubelet", "/kubelet/../..", "/a//b", "/a/b/c/d/e"] {
            let e = parse(&["--kubelet-cgroup-root", bad])
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("--kubelet-cgroup-root") && e.contains("`/name[/name...]`"),
                "{bad}: {e}"
            );
        }
    }

    /// `Config::layout` on trees: detection, the flag, a forced driver, and two candidates.
    #[test]
    fn layout_finds_the_kubelet_root() {
        let layout = |dirs: &[&str], root: Option<&str>, driver: Option<CgroupDriver>| {
            let tmp = tempfile::tempdir().expect("tmp");
            for d in dirs {
                std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
            }
            let cli = Cli::try_parse_from(["koord-applier", "once", "-f", "p"]).expect("parses");
            let cfg = Config {
                cgroup_root: tmp.path().to_owned(),
                cgroup_version: Some(CgroupVersion::V2),
                cgroup_driver: driver,
                kubelet_cgroup_root: root.map(|r| KubeletRoot::parse(r).expect("root")),
                ..Config::from(&cli.global)
            };
            cfg.layout()
                .map(|l| (l.driver, l.kubelet_root.to_string(), l.kubepods_dir()))
                .map_err(|e| e.to_string())
        };
        use CgroupDriver::{Cgroupfs, Systemd};
        let ok = |d, r: &str, k: &str| Ok((d, r.to_owned(), PathBuf::from(k)));
        assert_eq!(layout(&[], None, None), ok(Cgroupfs, "/", "kubepods"));
        assert_eq!(
            layout(&[], None, Some(Systemd)),
            ok(Systemd, "/", "kubepods.slice")
        );
        assert_eq!(
            layout(&["kubelet/kubepods/burstable"], None, None),
            ok(Cgroupfs, "/kubelet", "kubelet/kubepods")
        );
        assert_eq!(
            layout(&["kubelet.slice/kubelet-kubepods.slice"], None, None),
            ok(Systemd, "/kubelet", "kubelet.slice/kubelet-kubepods.slice")
        );
        // The flag wins over a decoy at the top; the driver comes from what is below it.
        assert_eq!(
            layout(
                &["kubepods", "kubelet.slice/kubelet-kubepods.slice"],
                Some("/kubelet"),
                None
            ),
            ok(Systemd, "/kubelet", "kubelet.slice/kubelet-kubepods.slice")
        );
        assert_eq!(
            layout(&[], Some("/kubelet"), None),
            ok(Cgroupfs, "/kubelet", "kubelet/kubepods")
        );
        let e = layout(&["kubelet/kubepods", "other/kubepods"], None, None).expect_err("ambiguous");
        assert!(
            e.contains("other/kubepods (cgroupRoot /other, cgroupfs)")
                && e.contains("--kubelet-cgroup-root"),
            "{e}"
        );
        // The flag settles it.
        assert_eq!(
            layout(
                &["kubelet/kubepods", "other/kubepods"],
                Some("/other"),
                None
            ),
            ok(Cgroupfs, "/other", "other/kubepods")
        );
    }

    #[test]
    fn addr_forms() {
        assert_eq!(
            parse_addr("127.0.0.1:1").expect("addr"),
            "127.0.0.1:1".parse().expect("addr")
        );
        assert!(parse_addr("nonsense").is_err());
    }

    #[test]
    fn systemd_flags() {
        use koord_translator::cgroup::systemd::Settings;
        let parse = |args: &[&str]| {
            let mut argv = vec!["koord-applier", "once", "-f", "p"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .map(|c| Config::from(&c.global).systemd)
                .map_err(|e| e.to_string())
        };
        let s = |mode, socket: &str| {
            Ok(Settings {
                mode,
                socket: PathBuf::from(socket),
            })
        };
        assert_eq!(parse(&[]), s(SystemdDbus::Auto, "/run/systemd/private"));
        for (arg, mode) in [
            ("--systemd-dbus=off", SystemdDbus::Off),
            // A Helm values file's unquoted `off` arrives as `false`.
            ("--systemd-dbus=false", SystemdDbus::Off),
            ("--systemd-dbus=on", SystemdDbus::On),
            ("--systemd-dbus=true", SystemdDbus::On),
        ] {
            assert_eq!(parse(&[arg]), s(mode, "/run/systemd/private"), "{arg}");
        }
        assert_eq!(
            parse(&["--systemd-socket", "/host-run-systemd/private"]),
            s(SystemdDbus::Auto, "/host-run-systemd/private")
        );
        assert!(parse(&["--systemd-dbus=maybe"]).is_err());
    }
}
