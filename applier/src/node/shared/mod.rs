//! What several node features read, written once: any feature may call it, and it imports no
//! feature, so the features never import each other (`tests/lib/module_graph.py` refuses an
//! import from one feature into another, and one from here into a feature).
//!
//! - [`limit`]: a limit file's text (`memory.max`, `memory.swap.max`, ...) as bytes.
//! - [`psi`]: the pressure files (`memory.pressure`, ...): their parser and reader.
//! - [`qos_label`]: whether a pod is BE by its QoS-class label.
//! - [`reclaim_slice`]: how one `memory.reclaim` write is cut.

pub mod limit;
pub mod psi;
pub mod qos_label;
pub mod reclaim_slice;
