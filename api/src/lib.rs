//! The contract shared by `koord-webhook` and `koord-applier`.
//!
//! Everything here is pure data: the label and annotation keys people touch, the
//! `koordinator.sh/resolved-qos` version 1 document (`docs/contract.md`), the cgroup knob
//! names, and Kubernetes quantity arithmetic. No IO, no async runtime.

pub mod colocation;
pub mod json_write;
pub mod keys;
pub mod knobs;
pub mod quantity;
pub mod resolved;
mod resolved_json;

pub use quantity::{Quantity, QuantityError};
pub use resolved::*;
