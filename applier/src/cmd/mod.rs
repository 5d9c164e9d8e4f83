//! The commands: `run` (the DaemonSet), `once` (one manifest, a JSON report) and
//! `once --collect` (one collector round, the Prometheus text). Each wires the features and the
//! cgroup pass from the parsed flags; none holds logic of its own.

pub mod collect;
pub mod features;
pub mod manifest;
pub mod once;
pub mod run;
