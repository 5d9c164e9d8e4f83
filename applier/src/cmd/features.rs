//! The one list of `run`'s node features, in the order they start, and what each hands the
//! pod watch or the pod pass. A new node feature is one line here (and its `NodeFeature`
//! implementation next to it in `node/`); `run` starts the list through
//! [`crate::feature::start_all`] before the watch.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, RunConfig};
use crate::feature::{Handover, NodeFeature, handover};
use crate::node::ancestors::{MemoryAncestors, ProtectAncestors};
use crate::node::be_swap::BeSwap;
use crate::node::collectors::Collectors;
use crate::node::colocation::ColocationFeature;
use crate::node::nri::NriPlugin;
use crate::node::nri::link::Plugged;
use crate::node::numa::MemoryLocality;
use crate::node::proactive::ProactiveReclaim;
use crate::node::qos_parents::{NodeQos, QosParents, Resctrl};
use crate::node::reclaim::{AsyncReclaim, AsyncReclaimFeature};
use crate::node::resctrl::ResctrlSupport;

/// What the started features hand over; each is empty when its feature is off.
pub struct Handovers {
    /// The QoS-class parents' (and resctrl groups') pass, run by the watch after each resync.
    pub node_qos: Handover<Arc<NodeQos>>,
    /// The async reclaim emulation: the pod pass's `ContainerHooks`.
    pub reclaim: Handover<Arc<AsyncReclaim>>,
    /// The ancestors' protection, run by the watch.
    pub ancestors: Handover<Arc<MemoryAncestors>>,
    /// The NRI plugin's link and nudges, for the watch.
    pub nri: Handover<Plugged>,
}

/// Every node feature of `run`, in start order. The order that matters: resctrl before the
/// QoS-class parents (their pass gets its support); all of them before the pod watch (async
/// reclaim sweeps the throttles an earlier applier left before the first pod pass, and the
/// watch takes the handovers).
pub fn node_features(config: &Config, run: &RunConfig) -> (Vec<Box<dyn NodeFeature>>, Handovers) {
    let (resctrl_give, resctrl) = handover::<(PathBuf, ResctrlSupport)>();
    let (node_qos_give, node_qos) = handover();
    let (reclaim_give, reclaim) = handover();
    let (ancestors_give, ancestors) = handover();
    let (nri_give, nri) = handover();
    let features: Vec<Box<dyn NodeFeature>> = vec![
        Box::new(Collectors {
            config: config.collectors.clone(),
        }),
        Box::new(MemoryLocality {
            config: config.locality,
        }),
        Box::new(ColocationFeature {
            settings: run.colocation.clone(),
        }),
        Box::new(Resctrl {
            root: config.resctrl_root.clone(),
            parents: resctrl_give,
        }),
        Box::new(QosParents {
            resctrl,
            watch: node_qos_give,
        }),
        Box::new(AsyncReclaimFeature {
            settings: run.reclaim.clone(),
            pod_pass: reclaim_give,
        }),
        Box::new(ProactiveReclaim {
            settings: run.proactive.clone(),
        }),
        Box::new(BeSwap {
            settings: run.be_swap.clone(),
        }),
        Box::new(ProtectAncestors {
            settings: config.ancestors,
            watch: ancestors_give,
        }),
        Box::new(NriPlugin {
            settings: run.nri.clone(),
            watch: nri_give,
        }),
    ];
    let handovers = Handovers {
        node_qos,
        reclaim,
        ancestors,
        nri,
    };
    (features, handovers)
}
