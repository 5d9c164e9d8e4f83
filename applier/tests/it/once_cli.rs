//! `koord-applier once -f POD_FILE`: the binary, its JSON report and --dry-run.

use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::process::Command;

use common::{Kernel, fixture, fixture_path, layout, make_pod_tree, read};

fn once(root: &std::path::Path, file: &str, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args([
            "once",
            "-f",
            &fixture_path(file),
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
        ])
        .arg("--cgroup-root")
        .arg(root)
        .args(extra)
        .output()
        .expect("run binary");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), json)
}

#[test]
fn once_reports_every_knob_and_dry_run_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let l = layout(tmp.path(), CgroupVersion::V2, CgroupDriver::Systemd);
    make_pod_tree(
        &l,
        Kernel::MainlineV2,
        &PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view"),
    );
    let high = tmp.path().join(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice/\
         cri-containerd-a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90.scope/memory.high",
    );

    let (code, dry) = once(tmp.path(), "ls-redis.json", &["--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(dry["dryRun"], true);
    assert_eq!(read(&high), "max", "dry run wrote nothing");
    let knobs = dry["knobs"].as_array().expect("knobs");
    assert_eq!(knobs.len(), 8 + 2 * 9, "every knob is listed");
    let k = knobs
        .iter()
        .find(|k| k["path"].as_str() == Some(high.to_str().expect("utf8")))
        .expect("memory.high entry");
    assert_eq!(
        (k["old"].as_str(), k["new"].as_str(), k["outcome"].as_str()),
        (Some("max"), Some("83886080"), Some("written"))
    );
    let unsupported = knobs
        .iter()
        .find(|k| k["knob"] == "memory.wmark_ratio")
        .expect("wmark entry");
    assert_eq!(unsupported["outcome"], "unsupported");
    assert_eq!(unsupported["reason"], "not supported by this kernel");

    let (code, applied) = once(tmp.path(), "ls-redis.json", &[]);
    assert_eq!((code, applied["status"].as_str()), (0, Some("applied")));
    assert_eq!(read(&high), "83886080");
    let (_, second) = once(tmp.path(), "ls-redis.json", &[]);
    assert_eq!(second["status"], "unchanged");
}

#[test]
fn once_refuses_forged_pod_with_exit_code_2() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = common::forged_pod_file(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args([
            "once",
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
            "-f",
        ])
        .arg(&file)
        .arg("--cgroup-root")
        .arg(tmp.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["status"], "refused");
    assert_eq!(
        report["reason"],
        "memoryQOS.containers[\"redis\"].memory.high = 999999999999 is above the container's memory limit 104857600"
    );
}
