//! The change list: what resolution does to the incoming pod, as data. Resolution produces it;
//! [`crate::mutation`] renders it (applied to a manifest, or as a JSON patch). A leaf: it
//! imports nothing from the crate.

use std::collections::BTreeMap;

/// An owned resource list in key order.
pub type OwnedResources = BTreeMap<String, String>;

/// A container's requests and limits after its cpu/memory moved to batch resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchResources {
    pub requests: Option<OwnedResources>,
    pub limits: Option<OwnedResources>,
}

/// Which container list of the pod spec a change addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerList {
    Containers,
    InitContainers,
}

impl ContainerList {
    /// The field name under `spec`.
    pub fn field(self) -> &'static str {
        match self {
            ContainerList::Containers => "containers",
            ContainerList::InitContainers => "initContainers",
        }
    }
}

/// One change to the incoming pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    SetLabel {
        key: &'static str,
        value: String,
    },
    SetAnnotation {
        key: &'static str,
        value: String,
    },
    /// Set `koordinator.sh/resolved-qos` to the resolution's text. The change carries no
    /// copy of it: the renderers write it from the resolution (in a patch, already escaped),
    /// and an admission that only adds it never renders the plain text at all.
    SetResolvedQos,
    /// Replace a container's requests and limits (a BE pod's batch resources).
    SetResources {
        list: ContainerList,
        index: usize,
        resources: BatchResources,
    },
    SetOverhead(OwnedResources),
}
