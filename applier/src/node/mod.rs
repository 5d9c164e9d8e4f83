//! The node loops: what the applier keeps in line for the node as a whole, each with its
//! flags, metrics and a [`crate::feature::NodeFeature`] that `run` starts from the one list in
//! `cmd/features.rs`: the QoS-level ancestors' protection ([`ancestors`]), the QoS-class
//! parents ([`qos_parents`]), the NRI plugin (container values at creation: [`nri`]), async and
//! BE-first reclaim ([`reclaim`]), proactive reclaim ([`proactive`]), swap for BE containers
//! ([`be_swap`]), colocation (batch capacity, BE CPU suppression:
//! [`colocation`]), memory locality ([`numa`]), the PSI and CPI collectors ([`collectors`]) and
//! resctrl ([`resctrl`]). What several of them read is in [`shared`]; the lasting values they
//! want in cgroup files are written by [`writer`]: no feature imports another.

pub mod ancestors;
pub mod be_swap;
pub mod collectors;
pub mod colocation;
pub mod nri;
pub mod numa;
pub mod proactive;
pub mod qos_parents;
pub mod reclaim;
pub mod resctrl;
pub mod shared;
pub mod writer;
