//! koord-translator: the applier's translating core. It turns one pod's
//! `koordinator.sh/resolved-qos` (`docs/contract.md`, "## 6. The applier's side") into cgroup
//! writes and says what happened, and knows nothing of the node features around it.
//!
//! - [`pod`]: the pod path's pure core and its writes: the pod as the applier reads it
//!   ([`pod::spec_view`], [`pod::phase`]), the write plan ([`pod::plan`], pure), the plan made
//!   real ([`pod::apply`]: read, compare, write, read back), what happened ([`pod::report`]) and
//!   its Event texts ([`pod::events`], [`pod::event`]);
//! - [`cgroup`]: the one door to the cgroup files (layout, detection, knob names,
//!   read-compare-write, outcomes, read-back) and, on the systemd driver, the unit properties
//!   a write goes through first ([`cgroup::systemd`]);
//! - [`metrics`]: the families a pass counts, registered into the caller's registry;
//! - [`fd_limit`]: the open-file limit the kept knob files are sized from.
//!
//! It depends on `koord_api` and `koord_runtime` only. A node feature that takes part in a
//! pod's pass (holds a container's knob for a while, or realizes knobs this kernel lacks) does
//! so through the one interface [`pod::hooks::ContainerHooks`], which the applier implements
//! and hands to [`pod::apply::Applier`]; the features read the pass's [`pod::report`]. The
//! crate boundary keeps the dependency one way: features -> translator, never back.

pub mod cgroup;
pub mod fd_limit;
pub mod metrics;
pub mod pod;
