//! Re-resolution of stored pods, the pure part: what re-resolving a pod would change
//! ([`plan`], the same answer admission gives), the Event note ([`message`]), which triggers
//! ask for which namespaces ([`scope`]), the request pacing ([`rate`]), the Lease
//! decisions ([`lease`]) and which watched pods were resized ([`resize`]). The IO around
//! them (Lease loop, lists, pod watch, patches, Events) is [`crate::server::reresolver`].

pub mod lease;
pub mod message;
pub mod plan;
pub mod rate;
pub mod resize;
pub mod scope;
pub mod stored_pod;
