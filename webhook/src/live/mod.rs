//! What admission and the controllers read, kept current: the shared state ([`state`]: the
//! policy snapshot, the namespace gate, limits, readiness, metrics) and the watches that keep
//! it so ([`watch`]: the two ConfigMaps and the Namespaces, each change parsed once off the
//! request path and swapped in).

pub mod state;
pub mod watch;
