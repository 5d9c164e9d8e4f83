//! The koordlet command line of the reference's documentation, as a DaemonSet's args carry it:
//! single-dash Go-style flags, koordlet gates this product does not have accepted with one
//! warning, unknown flags refused with a clear message.

use crate::common;

use std::process::Command;
use std::time::Duration;

use clap::Parser as _;
use common::{Kernel, fixture, fixture_path, layout, make_pod_tree};
use koord_applier::cli::{Cli, normalize_args};
use koord_applier::config::{Command as Sub, Config};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

/// The reference's line, word for word (its Performance Collector page: `kubectl edit ds
/// koordlet` and add these).
const GATES: &str = "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true,CPICollector=true,PSICollector=true";
const CPI_INTERVAL: &str = "-cpi-collector-interval-seconds=60";
const WARNING: &str = "koordlet gates not implemented by koord-applier, accepted and ignored: BECPUEvict, BEMemoryEvict, CgroupReconcile, Accelerators";

fn parse(args: &[&str]) -> (Config, Sub) {
    let mut all = vec!["koord-applier"];
    all.extend_from_slice(args);
    let normalized = normalize_args(all.iter().map(Into::into).collect()).expect("normalizes");
    let cli = Cli::try_parse_from(normalized).expect("clap parses");
    Config::from_cli(&cli).expect("gates and intervals are valid")
}

#[test]
fn the_reference_line_parses_after_run() {
    let (config, command) = parse(&[
        "run",
        "--node-name",
        "n1",
        GATES,
        CPI_INTERVAL,
        "-psi-collector-interval-seconds",
        "5",
    ]);
    assert!(matches!(command, Sub::Run(_)), "still the run command");
    let cfg = config.collectors;
    assert!(cfg.cpi && cfg.psi, "CPICollector and PSICollector are on");
    assert_eq!(cfg.cpi_interval, Duration::from_secs(60));
    assert_eq!(cfg.psi_interval, Duration::from_secs(5));
}

#[test]
fn the_binary_takes_the_reference_line_with_one_warning() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    make_pod_tree(
        &l,
        Kernel::MainlineV2,
        &PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args(["once", "-f", &fixture_path("ls-redis.json"), "-dry-run"])
        .args(["-cgroup-version=v2", "-cgroup-driver", "systemd"])
        .arg(format!("-cgroup-root={}", tmp.path().display()))
        .args([GATES, CPI_INTERVAL])
        .env_remove("KOORD_FEATURE_GATES")
        .output()
        .expect("run binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(stderr.matches(WARNING).count(), 1, "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["dryRun"], true, "-dry-run took effect");
}

#[test]
fn unknown_flags_and_gates_are_refused_clearly() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
            .args(args)
            .env_remove("KOORD_FEATURE_GATES")
            .output()
            .expect("run binary");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A koordlet flag this product does not have: refused by the name the user wrote.
    let (code, stderr) = run(&["run", "--node-name", "n1", "-runtime-hooks-network=tcp"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown flag \"-runtime-hooks-network=tcp\""),
        "{stderr}"
    );
    // A gate nobody has (a typo of ours): refused before anything starts.
    let (code, stderr) = run(&[
        "run",
        "--node-name",
        "n1",
        "-feature-gates=CPICollectr=true",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized feature gate \"CPICollectr\""),
        "{stderr}"
    );
}
