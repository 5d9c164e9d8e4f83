//! The one door through which a node feature takes part in a pod's pass.
//!
//! The translator names no feature: the applier binary implements [`ContainerHooks`] (today
//! with the async-reclaim emulation, which holds a BE container's `memory.high` while its
//! throttle is in force and realizes the `memory.wmark_*` knobs a mainline kernel lacks) and
//! hands it to [`crate::pod::apply::Applier::with_hooks`]. Features that only need to know what
//! a pass did read its [`PodReport`] instead.

use std::collections::BTreeMap;

use crate::pod::plan::{Plan, PlannedWrite};
use crate::pod::report::PodReport;
use crate::pod::spec_view::PodSpecView;

/// Per container, the knobs a feature realizes although this kernel lacks them.
pub type Emulated = BTreeMap<String, Vec<&'static str>>;

/// A node feature's part in a pod's pass. Called from the pass's thread (passes of different
/// pods run at once): every method must be quick and must not call back into the applier.
pub trait ContainerHooks: Send + Sync {
    /// Why the pass leaves `write` alone now, if the feature holds its file (it puts the value
    /// it found back when it lets go; the next pass compares as usual). Asked before the file
    /// is read; `Some` reports the knob `held` with that reason.
    fn holds(&self, pod: &PodSpecView, write: &PlannedWrite) -> Option<String>;

    /// After the writes of a pass: the feature sees which knobs the kernel lacked (the
    /// `unsupported` ones in `report`, in the order of `plan.writes`), takes the pod's
    /// containers on or off accordingly, and returns the knobs it realizes for each, which
    /// the Event names as emulated rather than unsupported.
    fn after_pass(&self, pod: &PodSpecView, plan: &Plan, report: &PodReport) -> Emulated;

    /// What realizes the emulated knobs, as the Event names it.
    fn emulated_by(&self) -> &'static str;

    /// The pod was deleted: drop what is kept for it.
    fn forget(&self, pod_uid: &str);
}
