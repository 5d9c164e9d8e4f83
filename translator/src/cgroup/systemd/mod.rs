//! Values of systemd units set through systemd. With the kubelet's systemd driver every cgroup
//! from `kubepods.slice` down is a systemd unit, and systemd writes every property it stores
//! for a unit back into its files whenever it re-applies the unit: every time the kubelet
//! updates its QoS slices (every minute and on pod changes), on `systemctl daemon-reload`, and
//! on every `SetUnitProperties` anyone makes on it. A value only written into the file lasts
//! until then. So on such a node the applier sets each value it writes on a unit as that
//! unit's runtime property (`SetUnitProperties(unit, runtime=true, ...)`, as the kubelet and
//! runc do), systemd stores and writes it, and the pass then reads the file back and compares
//! (and writes the file itself if it still differs).
//!
//! - [`unit`], [`property`], [`plan`]: which directories are units, a file's value as
//!   properties, and which calls a pass makes (pure, table-tested);
//! - [`wire`]: the D-Bus messages of that one call (pure; no D-Bus crate reads systemd's
//!   replies on its private socket, see there);
//! - [`dbus`]: the connection, on a thread of its own, with timeouts and backoff (IO);
//! - [`metrics`]; this file: the settings and [`Units`], what the passes call.
//!
//! Where systemd cannot be reached the passes write the files as on the cgroupfs driver, and
//! the outage is said once in the log, in `koord_applier_systemd_dbus_up` and
//! `koord_applier_systemd_fallback_total`, and by `koord-webhook doctor`. Decisions:
//! docs/decisions.md, "Values of systemd units are set through systemd".

pub mod dbus;
pub mod metrics;
pub mod plan;
pub mod property;
pub mod unit;
pub mod wire;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::cgroup::layout::Layout;
use dbus::{CallError, Dbus, DbusSettings, UNKNOWN_PROPERTY_ERROR};
use metrics::SystemdMetrics;
use plan::{Record, Want};
use unit::UnitNamer;

/// `--systemd-dbus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SystemdDbus {
    /// Where the kubelet uses the systemd driver on cgroup v2 and systemd's socket exists.
    Auto,
    /// Where the kubelet uses the systemd driver on cgroup v2, waiting for the socket if it is
    /// not there.
    #[value(alias = "true")]
    On,
    /// Never: cgroup files only. (`false`: what a YAML 1.1 `off` in a Helm values file becomes.)
    #[value(alias = "false")]
    Off,
}

/// The systemd writes' settings (`--systemd-dbus`, `--systemd-socket`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: SystemdDbus,
    pub socket: PathBuf,
}

impl Default for Settings {
    /// Off: a `Config` built in code writes files only unless asked.
    fn default() -> Self {
        Self {
            mode: SystemdDbus::Off,
            socket: PathBuf::from("/run/systemd/private"),
        }
    }
}

/// What [`decide`] reads from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The socket exists.
    pub socket: bool,
    /// The cgroup root is a real cgroup mount, not a directory laid out like one (a test
    /// tree, whose unit names must never reach the systemd of the machine running the test).
    pub cgroupfs: bool,
}

/// Whether to connect (pure): why not, when not.
pub fn decide(
    layout: &Layout,
    settings: &Settings,
    dry_run: bool,
    seen: Seen,
) -> Result<(), &'static str> {
    if settings.mode == SystemdDbus::Off {
        return Err("--systemd-dbus=off");
    }
    if UnitNamer::new(layout).is_none() {
        return Err("not the systemd driver on cgroup v2");
    }
    if dry_run {
        return Err("a dry run changes nothing");
    }
    if !seen.cgroupfs {
        return Err("the cgroup root is not a cgroup mount");
    }
    if settings.mode == SystemdDbus::Auto && !seen.socket {
        return Err("no socket");
    }
    Ok(())
}

/// How often the record is swept.
const SWEEP_EVERY: Duration = Duration::from_secs(300);
/// Distinct reasons logged for values systemd cannot take, at most.
const LOGGED_MAX: usize = 64;

struct State {
    record: Record,
    /// Properties this systemd refused as unknown: left to the files from then on.
    unsupported: BTreeSet<&'static str>,
    /// The connection count the record belongs to: a new connection means systemd was
    /// unreachable in between, and the record is forgotten (everything is stored again).
    connections: u64,
    last_sweep: Instant,
    /// Reasons already logged (values systemd cannot take, refusals).
    logged: BTreeSet<String>,
}

/// What the passes call: the node's units and the connection to systemd.
pub struct Units {
    namer: UnitNamer,
    dbus: Dbus,
    state: Mutex<State>,
    metrics: Option<SystemdMetrics>,
}

impl std::fmt::Debug for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Units")
            .field("namer", &self.namer)
            .field("up", &self.dbus.is_up())
            .finish_non_exhaustive()
    }
}

impl Units {
    /// Connects when [`decide`] says so (logging why not, once); `None` = cgroup files only.
    pub fn start(
        layout: &Layout,
        settings: &Settings,
        dry_run: bool,
        registry: Option<&prometheus::Registry>,
    ) -> Option<Arc<Self>> {
        let seen = Seen {
            socket: settings.socket.exists(),
            cgroupfs: crate::cgroup::file::open_dir(&layout.root)
                .is_ok_and(crate::cgroup::file::is_cgroupfs),
        };
        if let Err(why) = decide(layout, settings, dry_run, seen) {
            if why == "no socket" {
                tracing::warn!(
                    socket = %settings.socket.display(),
                    "the kubelet uses the systemd driver but systemd's socket is not there (not mounted?): \
                     values written into its slices and scopes last only until systemd next re-applies them \
                     (every kubelet QoS update, daemon-reload); cgroup files only"
                );
            } else {
                tracing::info!(
                    reason = why,
                    "systemd unit properties: off; cgroup files only"
                );
            }
            return None;
        }
        let namer = UnitNamer::new(layout)?;
        let metrics = match registry.map(SystemdMetrics::register).transpose() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "systemd metrics not registered");
                None
            }
        };
        match Self::with_settings(namer, DbusSettings::new(settings.socket.clone()), metrics) {
            Ok(u) => Some(Arc::new(u)),
            Err(e) => {
                tracing::error!(error = %e, "systemd: cannot start the connection thread; cgroup files only");
                None
            }
        }
    }

    /// Starts the connection with explicit settings (tests: a fake manager's socket, short
    /// timeouts).
    pub fn with_settings(
        namer: UnitNamer,
        settings: DbusSettings,
        metrics: Option<SystemdMetrics>,
    ) -> std::io::Result<Self> {
        let dbus = Dbus::start(settings, metrics.clone())?;
        Ok(Self {
            namer,
            state: Mutex::new(State {
                record: Record::default(),
                unsupported: BTreeSet::new(),
                connections: dbus.connections(),
                last_sweep: Instant::now(),
                logged: BTreeSet::new(),
            }),
            dbus,
            metrics,
        })
    }

    pub fn is_up(&self) -> bool {
        self.dbus.is_up()
    }

    /// Whether `dir` is a systemd unit's cgroup (its values go through systemd).
    pub fn is_unit(&self, dir: &std::path::Path) -> bool {
        self.namer.unit(dir).is_some()
    }

    fn fallback(&self, reason: &str) {
        if let Some(m) = &self.metrics {
            m.fallback.with_label_values(&[reason]).inc();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the properties of `wants` on their units, one call per unit that needs one (see
    /// [`plan::plan`]); for each want, whether systemd now holds its value. The caller then
    /// reads each file back and writes those that still differ (all of them, for a `false`).
    /// Blocks at most one call timeout per unit, and not at all while systemd is unreachable.
    pub fn store(&self, wants: &[Want<'_>]) -> Vec<bool> {
        let mut held = vec![false; wants.len()];
        let now = Instant::now();
        let planned = {
            let mut st = self.lock();
            let connections = self.dbus.connections();
            if connections != st.connections {
                st.connections = connections;
                st.record.clear();
            }
            if now.saturating_duration_since(st.last_sweep) >= SWEEP_EVERY {
                st.last_sweep = now;
                st.record.sweep(now);
            }
            let unsupported = st.unsupported.clone();
            let planned = plan::plan(&self.namer, wants, &unsupported, &mut st.record, now);
            for (i, why) in &planned.inexpressible {
                if st.logged.len() < LOGGED_MAX && st.logged.insert(why.clone()) {
                    tracing::warn!(dir = %wants[*i].dir.display(), reason = %why, "value systemd cannot store: written as a file only, which systemd's next re-apply of the unit may undo");
                }
            }
            planned
        };
        for (i, _) in &planned.inexpressible {
            if wants[*i].differs {
                self.fallback("inexpressible");
            }
        }
        for call in &planned.calls {
            match self.dbus.set_unit_properties(&call.unit, &call.properties) {
                Ok(()) => {
                    self.lock()
                        .record
                        .stored(&call.unit, &call.properties, Instant::now());
                    for &i in &call.wants {
                        held[i] = true;
                    }
                }
                Err(e) => {
                    self.fallback(e.reason());
                    if let CallError::Refused { name, message } = &e {
                        self.refused(call, name, message);
                    }
                    tracing::debug!(unit = %call.unit, error = %e, "SetUnitProperties failed; cgroup files only");
                }
            }
        }
        held
    }

    /// A refusal: recorded (not retried for a while unless a file differs), logged once per
    /// kind; an unknown property is left to the files from then on.
    fn refused(&self, call: &plan::UnitCall, name: &str, message: &str) {
        let mut st = self.lock();
        let unknown = (name == UNKNOWN_PROPERTY_ERROR)
            .then(|| call.properties.iter().find(|p| message.contains(p.name)))
            .flatten();
        // A property this systemd does not know is left out from now on, and the unit's other
        // values are tried again at the next pass without it.
        st.record.failed(
            &call.unit,
            &call.properties,
            unknown.is_none(),
            Instant::now(),
        );
        if let Some(p) = unknown {
            if st.unsupported.insert(p.name) {
                tracing::warn!(property = p.name, error = %message, "this systemd does not know the property: its file is written directly from now on");
            }
            return;
        }
        if st.logged.len() < LOGGED_MAX && st.logged.insert(format!("{name}: {message}")) {
            tracing::warn!(unit = %call.unit, error = %name, message = %message, "systemd refused SetUnitProperties: cgroup files only for this unit (said once per kind of refusal)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::{CgroupDriver, CgroupVersion};

    #[test]
    fn when_to_connect() {
        let sd = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Systemd);
        let fs = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Cgroupfs);
        let v1 = Layout::new("/cg", CgroupVersion::V1, CgroupDriver::Systemd);
        let s = |mode| Settings {
            mode,
            socket: PathBuf::from("/run/systemd/private"),
        };
        use SystemdDbus::{Auto, Off, On};
        let real = |socket| Seen {
            socket,
            cgroupfs: true,
        };
        let tree = Seen {
            socket: true,
            cgroupfs: false,
        };
        let cases = [
            (&sd, Auto, false, real(true), Ok(())),
            (&sd, Auto, false, real(false), Err("no socket")),
            (&sd, On, false, real(false), Ok(())),
            (&sd, Off, false, real(true), Err("--systemd-dbus=off")),
            (
                &sd,
                Auto,
                true,
                real(true),
                Err("a dry run changes nothing"),
            ),
            (
                &sd,
                On,
                false,
                tree,
                Err("the cgroup root is not a cgroup mount"),
            ),
            (
                &fs,
                On,
                false,
                real(true),
                Err("not the systemd driver on cgroup v2"),
            ),
            (
                &v1,
                Auto,
                false,
                real(true),
                Err("not the systemd driver on cgroup v2"),
            ),
        ];
        for (layout, mode, dry, seen, want) in cases {
            assert_eq!(
                decide(layout, &s(mode), dry, seen),
                want,
                "{mode:?} {} dry {dry} {seen:?}",
                layout.driver
            );
        }
    }
}
