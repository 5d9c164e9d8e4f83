//! What several node features read, written once: a pod's BE label ([`qos_label`]), a
//! container's cgroup ([`container_dir`]), limit files ([`limit`]), pressure files ([`psi`]) and
//! how a `memory.reclaim` write is cut ([`reclaim_slice`]). Any feature may call it; it imports
//! no feature, so features never import each other (`tests/lib/module_graph.py` checks both).

pub mod container_dir;
pub mod limit;
pub mod psi;
pub mod qos_label;
pub mod reclaim_slice;
