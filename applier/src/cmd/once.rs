//! `koord-applier once -f POD_FILE`: apply one manifest without an API server and print what
//! happened as JSON. The manifest is read and parsed once; the one pod view feeds the
//! memory/CPU QoS pass, the ancestors' memory protection, the resctrl pass and memory
//! locality, and any error of reading or parsing it ends the command with a message naming the
//! file.

use std::time::Instant;

use serde::Serialize;

use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::detect::DetectError;
use koord_translator::cgroup::layout::Layout;
use koord_translator::pod::apply::Applier;
use koord_translator::pod::plan::NodeCaps;
use koord_translator::pod::report::{PodReport, PodStatus};
use koord_translator::pod::spec_view::{PodSpecView, PodSpecViewError};

use super::manifest::{ManifestError, read_pod};
use crate::config::{Config, OnceConfig};
use crate::node::ancestors::{AncestorsReport, MemoryAncestors};
use crate::node::numa::locality::once_locality;
use crate::node::numa::report::LocalityReport;
use crate::node::numa::timings::micros_since;
use crate::node::qos_parents::{NodeQos, detect_caps, detect_resctrl};
use crate::node::resctrl::ResctrlReport;

/// The JSON report of `once`: the cgroup pass, the ancestors' memory protection, then the
/// locality and resctrl passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OnceReport {
    #[serde(flatten)]
    pub pod: PodReport,
    /// `kubepods` and the QoS-class directories after the pod's pass (`--protect-ancestors`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ancestors: Option<AncestorsReport>,
    /// The memory locality pass (`run` reports it as Events instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locality: Option<LocalityReport>,
    /// The resctrl pass (`run` does it per resync for the whole node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resctrl: Option<ResctrlReport>,
    /// `--timings`: where the command spent its time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<OnceTimings>,
}

/// The phases of `once` in microseconds, from `main`'s first instruction to the report (the
/// locality pass's own phases are in `locality.timings`). What a whole command takes beyond
/// `totalMicros` is the process's start (exec, dynamic loading) and exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OnceTimings {
    /// The rustls provider, the flags, logging.
    pub setup_micros: u64,
    /// The cgroup layout and the node's CPU QoS capabilities.
    pub layout_micros: u64,
    /// Reading and parsing the manifest into the pod view.
    pub manifest_micros: u64,
    /// The memory/CPU QoS cgroup pass and the QoS-class ancestors' protection.
    pub cgroup_pass_micros: u64,
    /// resctrl detection and its pass.
    pub resctrl_micros: u64,
    /// The memory locality pass, with the annotation check before it.
    pub locality_micros: u64,
    /// `main` to the report built.
    pub total_micros: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    #[error(transparent)]
    Layout(#[from] DetectError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{path}: {source}")]
    Pod {
        path: String,
        #[source]
        source: PodSpecViewError,
    },
}

/// Applies the pod in `once.file` and returns the report; with `once.timings`, `started` (when
/// `main` started) begins the report's account of where the time went.
pub fn run(config: &Config, once: &OnceConfig, started: Instant) -> Result<OnceReport, OnceError> {
    let timings = once.timings.then_some(started);
    let mut t = OnceTimings::default();
    let mut phase = Instant::now();
    // Microseconds of the phase that ends now; the next one starts.
    let mut lap = || {
        let us = micros_since(phase);
        phase = Instant::now();
        us
    };
    t.setup_micros = timings.map_or(0, micros_since);
    let layout = config.cgroup.layout()?;
    let caps = detect_caps(
        &layout,
        config.cpu_idle_fallback,
        config.cpu_idle_qos_parents,
    );
    t.layout_micros = lap();
    let pod = read_pod(&once.file)?;
    let view = PodSpecView::from_pod(&pod).map_err(|source| OnceError::Pod {
        path: once.file.display().to_string(),
        source,
    })?;
    t.manifest_micros = lap();
    // On the systemd driver, unit values go through systemd here too.
    let systemd = koord_translator::cgroup::systemd::Units::start(
        &layout,
        &config.systemd,
        config.dry_run,
        None,
    );
    let applier = Applier::new(layout.clone(), config.dry_run, None)
        .with_caps(caps)
        .with_systemd(systemd.clone());
    let pod = applier.apply(&view);
    let ancestors = ancestors_pass(config, &layout, &pod, systemd);
    let mut report = OnceReport {
        pod,
        ancestors,
        locality: None,
        resctrl: None,
        timings: None,
    };
    t.cgroup_pass_micros = lap();
    resctrl_pass(config, &layout, caps, &view, &mut report);
    t.resctrl_micros = lap();
    if !config.dry_run {
        report.locality = once_locality(
            layout,
            &config.proc_root,
            &config.sys_root,
            config.locality,
            &view,
        );
    }
    t.locality_micros = lap();
    match timings {
        Some(main_started) => {
            t.total_micros = micros_since(main_started);
            report.timings = Some(t);
        }
        None => report.locality = report.locality.map(LocalityReport::without_timings),
    }
    Ok(report)
}

/// The sums on `kubepods` and the QoS-class directories, read from the kernel (so right although
/// `once` sees one pod), after a pass that applied the pod; a pod refused or not managed leaves
/// the node's ancestors alone.
fn ancestors_pass(
    config: &Config,
    layout: &Layout,
    pod: &PodReport,
    systemd: Option<std::sync::Arc<koord_translator::cgroup::systemd::Units>>,
) -> Option<AncestorsReport> {
    let applied = matches!(
        pod.status,
        PodStatus::Applied | PodStatus::Unchanged | PodStatus::Failed | PodStatus::Held
    );
    (config.ancestors.enabled && applied).then(|| {
        MemoryAncestors::new(
            layout.clone(),
            config.dry_run,
            config.ancestors.kubelet_memory_qos,
            None,
        )
        .with_systemd(systemd)
        .reconcile()
    })
}

/// The pod's resctrl class group, when resctrl is usable; a failure fails the report.
fn resctrl_pass(
    config: &Config,
    layout: &Layout,
    caps: NodeCaps,
    view: &PodSpecView,
    report: &mut OnceReport,
) {
    let Some(support) = detect_resctrl(&config.resctrl_root, None) else {
        return;
    };
    let node = NodeQos::new(
        layout.clone(),
        config.dry_run,
        caps,
        Some((config.resctrl_root.clone(), support)),
        None,
    );
    let r = node.once(view);
    report.resctrl = r.resctrl;
    if let Some(e) = r.resctrl_error {
        report.pod.status = PodStatus::Failed;
        report.pod.reason = Some(match report.pod.reason.take() {
            Some(prev) => format!("{prev}; resctrl: {e}"),
            None => format!("resctrl: {e}"),
        });
    }
}

/// 0 when the pod is as the annotation says (or unmanaged), 2 when it was refused or failed
/// (a failed memory locality pass or ancestor write included: the protection would not hold).
pub fn exit_code(report: &OnceReport) -> i32 {
    if report.locality.as_ref().is_some_and(LocalityReport::failed)
        || report
            .ancestors
            .as_ref()
            .is_some_and(|a| a.count(Outcome::Failed) > 0)
    {
        return 2;
    }
    match report.pod.status {
        PodStatus::Applied | PodStatus::Unchanged | PodStatus::Unmanaged | PodStatus::Held => 0,
        PodStatus::Refused | PodStatus::Failed => 2,
    }
}
