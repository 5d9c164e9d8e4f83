//! The applier's configuration: one [`Config`] and the [`Command`] to run, built once from the
//! parsed flags ([`Config::from_cli`], every check done there, [`ConfigError`] naming the flag
//! and its range) and read by the commands and the node features; tests build them directly. Plain
//! typed sections: the global settings and `once`'s here, where the cgroups are ([`cgroup`]),
//! `run`'s ([`run`]), and each feature's settings, whose types live with the feature. The
//! flags themselves are `crate::cli`'s.

pub mod cgroup;
mod error;
pub mod run;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use koord_runtime::LogFormat;
use koord_translator::cgroup::systemd;

use crate::cli::{self, Cli, GlobalArgs, OnceArgs};
use crate::node::ancestors::AncestorSettings;
use crate::node::collectors::{CollectorConfig, Gates};
use crate::node::numa::LocalityConfig;
pub use cgroup::CgroupConfig;
pub use error::ConfigError;
pub use run::{RunConfig, parse_addr};

/// Everything the applier was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `--cgroup-*`, `--kubelet-cgroup-root`: where the cgroups are, and how they are laid out.
    pub cgroup: CgroupConfig,
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub resctrl_root: PathBuf,
    pub dry_run: bool,
    pub log_format: LogFormat,
    pub cpu_idle_fallback: bool,
    pub cpu_idle_qos_parents: bool,
    /// `--locality-max-pages-per-second`.
    pub locality: LocalityConfig,
    /// `--feature-gates` and the intervals; `run` and `once --collect` read it (`once` without
    /// `--collect` collects nothing: its gates are checked, its intervals not read).
    pub collectors: CollectorConfig,
    /// `--protect-ancestors`, `--kubelet-memory-qos`.
    pub ancestors: AncestorSettings,
    /// `--systemd-dbus`, `--systemd-socket`.
    pub systemd: systemd::Settings,
}

/// The command to run, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Box<RunConfig>),
    Once(OnceConfig),
}

impl Config {
    /// The configuration and the command the flags say, or the first flag out of range
    /// (`--feature-gates` first).
    pub fn from_cli(cli: &Cli) -> Result<(Self, Command), ConfigError> {
        let g = &cli.global;
        let gates = crate::node::collectors::parse_gates(&g.feature_gates)?;
        let command = match &cli.command {
            cli::Command::Run(a) => Command::Run(Box::new(RunConfig::from_flags(a, &g.proc_root)?)),
            cli::Command::Once(a) => Command::Once(OnceConfig::from_flags(a)?),
        };
        let collectors = match &command {
            Command::Run(_) => collectors(g, gates, false)?,
            Command::Once(once) if once.collect => collectors(g, gates, true)?,
            Command::Once(_) => CollectorConfig {
                ignored_gates: gates.ignored,
                ..CollectorConfig::disabled()
            },
        };
        let config = Config {
            cgroup: CgroupConfig {
                root: g.cgroup_root.clone(),
                version: g.cgroup_version,
                driver: g.cgroup_driver,
                kubelet_root: g.kubelet_cgroup_root.clone(),
            },
            proc_root: g.proc_root.clone(),
            sys_root: g.sys_root.clone(),
            resctrl_root: g.resctrl_root.clone(),
            dry_run: g.dry_run,
            log_format: g.log_format,
            cpu_idle_fallback: g.cpu_idle_fallback,
            cpu_idle_qos_parents: g.cpu_idle_qos_parents,
            locality: LocalityConfig {
                max_pages_per_second: Some(g.locality_max_pages_per_second).filter(|n| *n > 0),
            },
            collectors,
            ancestors: AncestorSettings {
                enabled: g.protect_ancestors,
                kubelet_memory_qos: g.kubelet_memory_qos,
            },
            systemd: systemd::Settings {
                mode: g.systemd_dbus,
                socket: g.systemd_socket.clone(),
            },
        };
        Ok((config, command))
    }
}

/// `once -f FILE`: apply the pod, or (`--collect`) collect for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnceConfig {
    /// `-f`: the pod manifest (`--collect`: or a List of pods).
    pub file: PathBuf,
    /// `--collect`: one collector round instead of applying.
    pub collect: bool,
    /// `--collect-serve`: keep collecting and serve `/metrics` here.
    pub collect_serve: Option<SocketAddr>,
    /// `--timings`: the report says where the time went.
    pub timings: bool,
}

impl OnceConfig {
    fn from_flags(a: &OnceArgs) -> Result<Self, ConfigError> {
        let serve = |s: &String| parse_addr(s).ok_or_else(|| ConfigError::CollectServe(s.clone()));
        Ok(Self {
            file: a.file.clone(),
            collect: a.collect,
            collect_serve: a.collect_serve.as_ref().map(serve).transpose()?,
            timings: a.timings,
        })
    }
}

/// The collectors' settings; a gate not named takes `default_on`.
fn collectors(
    a: &GlobalArgs,
    gates: Gates,
    default_on: bool,
) -> Result<CollectorConfig, ConfigError> {
    let (cpi, window, psi) = (
        a.cpi_collector_interval_seconds,
        a.collect_cpi_timewindow_seconds,
        a.psi_collector_interval_seconds,
    );
    if cpi == 0 || window == 0 || psi == 0 {
        return Err(ConfigError::CollectorInterval);
    }
    if window > cpi {
        return Err(ConfigError::CpiWindow {
            window,
            interval: cpi,
        });
    }
    Ok(CollectorConfig {
        cpi: gates.cpi.unwrap_or(default_on),
        psi: gates.psi.unwrap_or(default_on),
        cpi_interval: Duration::from_secs(cpi),
        cpi_window: Duration::from_secs(window),
        psi_interval: Duration::from_secs(psi),
        cpi_software_events: a.cpi_software_events,
        ignored_gates: gates.ignored,
    })
}
