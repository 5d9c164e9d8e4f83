//! Intel RDT through `/sys/fs/resctrl`: one control group per QoS class (`koord-LS`,
//! `koord-BE`), its schemata computed from the resolved `resctrlQOS`, and the tasks of each
//! class's containers kept in it.

pub mod manager;
pub mod schemata;

pub use manager::{
    ClassGroup, PodResctrl, ResctrlError, ResctrlReport, ResctrlSupport, detect, reconcile,
    reconcile_with,
};
