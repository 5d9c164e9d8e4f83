//! Swap for BE containers (`--be-swap-percent`): on a node with swap, the applier lets each
//! BE pod's containers swap up to a share of their memory limit, so that the kernel's reclaim
//! (and the BE-first reclaim and throttle of [`crate::node::reclaim`]) can take BE anonymous
//! memory instead of finding only page cache to drop.
//!
//! Why the applier and not the kubelet: Koordinator's BE pods ask `kubernetes.io/batch-memory`,
//! not `memory`, so the kubelet counts them BestEffort, and its `LimitedSwap` gives BestEffort
//! containers no swap (`memory.swap.max` 0). Off by default: the kubelet's values stand.
//!
//! The grant ([`grant::grant_bytes`]) comes from the pod spec (the container's limit) and the
//! node (`/proc/meminfo`), never from annotation text; which pods are BE is their
//! `koordinator.sh/qosClass` label, the one the webhook resolves the class from. A grant only
//! raises `memory.swap.max` (a larger value, the kubelet's, stands), and every grant is put
//! back to the value before it when the applier exits ([`worker::SwapGrants::release_all`]).

pub mod feature;
pub mod grant;
pub mod metrics;
mod settings;
pub mod worker;

pub use feature::BeSwap;
pub use settings::Settings;
