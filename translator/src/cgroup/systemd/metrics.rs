//! The metric families of the systemd writes, registered in the applier's registry (only
//! where the applier writes systemd units through systemd: the systemd driver on cgroup v2 and
//! `--systemd-dbus` not off).

use koord_runtime::metrics::{MetricError, register};
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct SystemdMetrics {
    /// 1 while connected to systemd; 0 while its values go to the files only.
    pub up: IntGauge,
    /// `SetUnitProperties` calls by result (`ok`, `refused`, `timeout`, `lost`).
    pub calls: IntCounterVec,
    /// Unit updates written to the files only, by reason (`unreachable`, `busy`, `timeout`,
    /// `refused`, `inexpressible`).
    pub fallback: IntCounterVec,
    /// Connection attempts by result (`connected`, `failed`, `lost`).
    pub connections: IntCounterVec,
}

impl SystemdMetrics {
    pub fn register(r: &Registry) -> Result<Self, MetricError> {
        let counters = |name: &str, help: &str, labels: &[&str]| {
            register(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let m = Self {
            up: register(
                r,
                IntGauge::new(
                    "koord_applier_systemd_dbus_up",
                    "1 while the applier sets the values of systemd units through systemd (SetUnitProperties), 0 while it can only write their cgroup files (systemd undoes those at its next re-apply).",
                ),
            )?,
            calls: counters(
                "koord_applier_systemd_calls_total",
                "SetUnitProperties calls by result: ok, refused (systemd answered an error), timeout, lost (the connection broke).",
                &["result"],
            )?,
            fallback: counters(
                "koord_applier_systemd_fallback_total",
                "Unit updates written to the cgroup files only, by reason: unreachable, busy, timeout, refused, inexpressible.",
                &["reason"],
            )?,
            connections: counters(
                "koord_applier_systemd_connections_total",
                "Connections to systemd by result: connected, failed, lost.",
                &["result"],
            )?,
        };
        // Every series from the start, at 0: a rate over a counter that appears late is lost.
        for r in ["ok", "refused", "timeout", "lost"] {
            m.calls.with_label_values(&[r]);
        }
        for r in ["unreachable", "busy", "timeout", "refused", "inexpressible"] {
            m.fallback.with_label_values(&[r]);
        }
        for r in ["connected", "failed", "lost"] {
            m.connections.with_label_values(&[r]);
        }
        Ok(m)
    }
}
