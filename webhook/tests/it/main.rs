//! The webhook's integration tests: one test binary, one module per area (a binary per file
//! linked kube, tokio and rustls once per file). Run one area with
//! `cargo test -p koord-webhook --test it <module>::`, e.g. `server_admission::`.
//!
//! All modules run in one process, in parallel threads: a test must not rely on process-wide
//! state of its own (environment variables it sets, the working directory, a global it assumes
//! it alone touches). The attack tests, which need the machine to themselves, are the second
//! binary, `tests/attack`; `docs::every_crate_has_one_integration_test_binary` keeps it so.

mod common;
mod fake_apiserver;
mod server_support;

mod docs;
mod manifests;
mod reresolve_elector;
mod reresolve_one_answer;
mod reresolve_resize;
mod resolve_cli;
mod resolve_colocation;
mod resolve_pod_shapes;
mod resolve_proactive_reclaim;
mod resolve_properties;
mod resolve_resize;
mod resolve_rules;
mod review_golden;
mod self_certs;
mod server_admission;
mod server_config_watch;
mod server_fuzz;
mod server_tls;
