//! The pod path: the pods of this node from the watch ([`watch`], [`event`], [`phase`]), each
//! read as the applier needs it ([`spec_view`]), its annotation checked and turned into a write
//! plan ([`plan`], pure), the plan made real in the cgroup files ([`apply`]) and what happened
//! said ([`report`], [`events`]: the Event texts).

pub mod apply;
pub mod event;
pub mod events;
pub mod phase;
pub mod plan;
pub mod report;
pub mod spec_view;
pub mod watch;
