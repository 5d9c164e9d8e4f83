//! Re-resolution of stored pods, one room: the pure part — what re-resolving a pod would change
//! ([`plan`], the same answer admission gives), the Event note ([`message`]), a burst of
//! triggers ([`crate::triggers`]) folded into one pass ([`scope`]), the request pacing
//! ([`rate`]), the Lease decisions ([`lease`]) and which watched pods were resized
//! ([`resize`]) — and the controller that does the IO around them (Lease loop, lists, pod
//! watch, patches, Events: [`controller`]), started by `serve`.

pub mod controller;
pub mod lease;
pub mod message;
pub mod plan;
pub mod rate;
pub mod resize;
pub mod scope;
pub mod stored_pod;
