//! The collectors' flags (`--feature-gates` and the intervals, as the reference names them) and
//! the settings they become. Pure.

use std::time::Duration;

/// The collectors' flags, as the reference names them (with `-seconds`, since ours take
/// integers). Global: `run` and `once --collect` read the same ones.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CollectorArgs {
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
}

impl Default for CollectorArgs {
    /// The flags' defaults: both gates off, the reference's intervals.
    fn default() -> Self {
        Self {
            feature_gates: String::new(),
            cpi_collector_interval_seconds: 60,
            collect_cpi_timewindow_seconds: 10,
            psi_collector_interval_seconds: 10,
            cpi_software_events: false,
        }
    }
}

/// The collectors' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorConfig {
    pub cpi: bool,
    pub psi: bool,
    pub cpi_interval: Duration,
    pub cpi_window: Duration,
    pub psi_interval: Duration,
    /// Software clocks instead of cycles/instructions (benchmarks on machines without a PMU).
    pub cpi_software_events: bool,
    /// koordlet gates named in `--feature-gates` that this product does not have.
    pub ignored_gates: Vec<&'static str>,
}

impl CollectorConfig {
    /// Both off, reference intervals.
    pub fn disabled() -> Self {
        Self {
            cpi: false,
            psi: false,
            cpi_interval: Duration::from_secs(60),
            cpi_window: Duration::from_secs(10),
            psi_interval: Duration::from_secs(10),
            cpi_software_events: false,
            ignored_gates: Vec::new(),
        }
    }

    pub fn any(&self) -> bool {
        self.cpi || self.psi
    }

    /// From the flags; a gate not named takes `default_on`.
    pub fn from_args(a: &CollectorArgs, default_on: bool) -> Result<Self, GateError> {
        let gates = parse_gates(&a.feature_gates)?;
        if a.cpi_collector_interval_seconds == 0
            || a.collect_cpi_timewindow_seconds == 0
            || a.psi_collector_interval_seconds == 0
        {
            return Err(GateError::Interval);
        }
        if a.collect_cpi_timewindow_seconds > a.cpi_collector_interval_seconds {
            return Err(GateError::Window {
                window: a.collect_cpi_timewindow_seconds,
                interval: a.cpi_collector_interval_seconds,
            });
        }
        Ok(Self {
            cpi: gates.cpi.unwrap_or(default_on),
            psi: gates.psi.unwrap_or(default_on),
            cpi_interval: Duration::from_secs(a.cpi_collector_interval_seconds),
            cpi_window: Duration::from_secs(a.collect_cpi_timewindow_seconds),
            psi_interval: Duration::from_secs(a.psi_collector_interval_seconds),
            cpi_software_events: a.cpi_software_events,
            ignored_gates: gates.ignored,
        })
    }
}

/// The gates as given; `None` = not named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gates {
    pub cpi: Option<bool>,
    pub psi: Option<bool>,
    /// koordlet gates that were named and that this product does not have, in the order
    /// given (each once): accepted, so a koordlet DaemonSet's line works, and warned about.
    pub ignored: Vec<&'static str>,
}

/// koordlet's feature gates (`pkg/features/koordlet_features.go`) other than the two
/// collectors. Memory QoS (`CgroupReconcile`), BE suppression and the like are not gates
/// here: they follow the annotation and the ConfigMap.
pub const KOORDLET_GATES_NOT_IMPLEMENTED: &[&str] = &[
    "Accelerators",
    "AuditEvents",
    "AuditEventsHTTPHandler",
    "BECPUEvict",
    "BECPUSuppress",
    "BEMemoryEvict",
    "BlkIOReconcile",
    "CgroupReconcile",
    "ColdPageCollector",
    "CoreSched",
    "CPUBurst",
    "HugePageReport",
    "Libpfm4",
    "NodeTopologyReport",
    "RdtResctrl",
    "SystemConfig",
];

/// The one warning (logged once at start) naming the koordlet gates of `--feature-gates` this
/// product does not have; `None` when there are none.
pub fn ignored_gates_warning(ignored: &[&str]) -> Option<String> {
    (!ignored.is_empty()).then(|| {
        format!(
            "--feature-gates: koordlet gates not implemented by koord-applier, accepted and ignored: {}",
            ignored.join(", ")
        )
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error(
        "--feature-gates: {0:?} is not Name=true|false (known: CPICollector, PSICollector and koordlet's other gates)"
    )]
    Syntax(String),
    #[error(
        "--feature-gates: unrecognized feature gate {0:?} (known: CPICollector, PSICollector and koordlet's other gates)"
    )]
    Unknown(String),
    #[error("collector intervals and the CPI window must be at least 1 second")]
    Interval,
    #[error(
        "--collect-cpi-timewindow-seconds ({window}) exceeds --cpi-collector-interval-seconds ({interval})"
    )]
    Window { window: u64, interval: u64 },
}

/// Parses `CPICollector=true,PSICollector=false` (Kubernetes' `--feature-gates` syntax).
pub fn parse_gates(s: &str) -> Result<Gates, GateError> {
    let mut g = Gates::default();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| GateError::Syntax(item.to_owned()))?;
        let value = match value.trim() {
            "true" => true,
            "false" => false,
            _ => return Err(GateError::Syntax(item.to_owned())),
        };
        match name.trim() {
            "CPICollector" => g.cpi = Some(value),
            "PSICollector" => g.psi = Some(value),
            other => {
                let known = KOORDLET_GATES_NOT_IMPLEMENTED
                    .iter()
                    .find(|k| **k == other)
                    .ok_or_else(|| GateError::Unknown(other.to_owned()))?;
                if !g.ignored.contains(known) {
                    g.ignored.push(known);
                }
            }
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_like_kubernetes() {
        assert_eq!(parse_gates("").expect("empty"), Gates::default());
        assert_eq!(
            parse_gates("CPICollector=true,PSICollector=false").expect("valid"),
            Gates {
                cpi: Some(true),
                psi: Some(false),
                ignored: vec![]
            }
        );
        assert_eq!(
            parse_gates(" PSICollector=true , Libpfm4=true").expect("valid"),
            Gates {
                cpi: None,
                psi: Some(true),
                ignored: vec!["Libpfm4"]
            }
        );
        assert!(matches!(
            parse_gates("CPICollector"),
            Err(GateError::Syntax(_))
        ));
        assert!(matches!(
            parse_gates("CPICollector=yes"),
            Err(GateError::Syntax(_))
        ));
        assert!(matches!(
            parse_gates("Foo=true"),
            Err(GateError::Unknown(_))
        ));
        // A typo of a gate we have is refused, not ignored.
        assert!(matches!(
            parse_gates("CPICollectr=true"),
            Err(GateError::Unknown(_))
        ));
    }

    #[test]
    fn the_reference_line_gives_one_warning_naming_the_ignored_gates() {
        let line = "BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true,CPICollector=true,PSICollector=true";
        let g = parse_gates(line).expect("the reference's gates parse");
        assert_eq!((g.cpi, g.psi), (Some(true), Some(true)));
        assert_eq!(
            g.ignored,
            [
                "BECPUEvict",
                "BEMemoryEvict",
                "CgroupReconcile",
                "Accelerators"
            ]
        );
        assert_eq!(
            ignored_gates_warning(&g.ignored).as_deref(),
            Some(
                "--feature-gates: koordlet gates not implemented by koord-applier, accepted and ignored: BECPUEvict, BEMemoryEvict, CgroupReconcile, Accelerators"
            )
        );
        assert_eq!(ignored_gates_warning(&[]), None);
    }

    fn args(gates: &str, cpi: u64, window: u64, psi: u64) -> CollectorArgs {
        CollectorArgs {
            feature_gates: gates.to_owned(),
            cpi_collector_interval_seconds: cpi,
            collect_cpi_timewindow_seconds: window,
            psi_collector_interval_seconds: psi,
            cpi_software_events: false,
        }
    }

    #[test]
    fn config_defaults_and_checks() {
        let c = CollectorConfig::from_args(&args("", 60, 10, 10), false).expect("valid");
        assert_eq!(c, CollectorConfig::disabled());
        assert!(!c.any());
        let c = CollectorConfig::from_args(&args("PSICollector=true", 60, 10, 10), false)
            .expect("valid");
        assert!(c.psi && !c.cpi);
        let c = CollectorConfig::from_args(&args("CPICollector=false", 60, 10, 10), true)
            .expect("valid");
        assert!(c.psi && !c.cpi, "once --collect: unnamed gates default on");
        assert_eq!(
            CollectorConfig::from_args(&args("", 5, 10, 10), false),
            Err(GateError::Window {
                window: 10,
                interval: 5
            })
        );
        assert_eq!(
            CollectorConfig::from_args(&args("", 60, 10, 0), false),
            Err(GateError::Interval)
        );
    }
}
