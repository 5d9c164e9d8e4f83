//! The applier's attack test: thousands of connections on the metrics endpoint while the
//! applier keeps answering a normal client within a bound and repairing hand edits. A second
//! test binary because such a bound needs the machine to itself: cargo runs test binaries one
//! after another, and in the `it` binary the other tests would run beside the attack (libtest
//! has no exclusive tests).

// The helpers of the `it` binary; this binary uses part of them.
#[allow(dead_code)]
#[path = "../it/common/mod.rs"]
mod common;

mod endpoint_abuse;
