//! The pod path's core: each pod read as the applier needs it ([`spec_view`], [`phase`]), its
//! annotation checked and turned into a write plan ([`plan`], pure), the plan made real in the
//! cgroup files ([`apply`]) and what happened said ([`report`], [`events`]: the Event texts,
//! [`event`]: the Event every feature words). A node feature takes part in a pass only through
//! [`hooks`].

pub mod apply;
pub mod event;
pub mod events;
pub mod hooks;
pub mod phase;
pub mod plan;
pub mod report;
pub mod spec_view;
