//! The webhook's attack tests: a real server under hundreds of hostile connections, with its
//! answers to a normal client held to a latency bound (and its log to a length). A second test binary because such a
//! bound needs the machine to itself: cargo runs test binaries one after another, and in the
//! `it` binary the other tests would run beside the attack (libtest has no exclusive tests).
//! The attacks also take [`child::heavy`], so two never overlap here.
//! `webhook/benches/abuse.sh` runs them at full size.

mod child;
mod h2_attacker;
// The helpers of the `it` binary; this binary uses part of them.
#[allow(dead_code)]
#[path = "../it/server_support/mod.rs"]
mod server_support;
// The fake API server of the `it` binary, for the re-resolver's memory test.
#[allow(dead_code)]
#[path = "../it/fake_apiserver/mod.rs"]
mod fake_apiserver;

mod log_flood;
mod reresolve_memory;
mod server_abuse;
mod server_abuse_h2;
mod server_drain;
mod server_lockout;
