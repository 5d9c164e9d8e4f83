//! The collectors' settings and `--feature-gates` (Kubernetes' syntax, koordlet's names). Pure.

use std::time::Duration;

/// The collectors' settings (`--feature-gates` and the intervals, as the reference names them).
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
}
