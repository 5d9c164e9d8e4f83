//! The applier's integration tests: one test binary, one module per area (a binary per file
//! linked kube, tokio and hyper once per file). Run one area with
//! `cargo test -p koord-applier --test it <module>::`, e.g. `trees::`.
//!
//! All modules run in one process, in parallel threads: a test must not rely on process-wide
//! state of its own (environment variables it sets, the working directory, a global it assumes
//! it alone touches). The machine tests that burn and measure CPU on the real hierarchy take
//! [`common::cpu_measurement`], so they never measure each other. The attack test, which
//! needs the machine to itself, is the second binary, `tests/attack`. A new test goes in a
//! module here: a `tests/*.rs` file would be a binary of its own (the webhook's
//! `docs::every_crate_has_one_integration_test_binary` fails on one).

mod common;

mod ancestor_trees;
mod ancestors_run;
mod async_reclaim;
mod be_swap;
mod collectors_manifests;
mod collectors_once;
mod collectors_perf;
mod collectors_psi;
mod collectors_run;
mod colocation_formulas;
mod colocation_mock;
mod colocation_node;
mod colocation_real_v1;
mod colocation_trees;
mod cpu_idle_real_v1;
mod cpu_qos_trees;
mod held_by_parent_v1;
mod kept_files;
mod koordlet_flags;
mod kubelet_root;
mod locality_events;
mod locality_real;
mod locality_run;
mod locality_trees;
mod nri_golden;
mod nri_plugin;
mod once_cli;
mod proactive_reclaim;
mod real_cgroup_v1;
mod resctrl_tree;
mod resize_hold;
mod systemd_dbus;
mod systemd_real;
mod trees;
mod watch_mock;
