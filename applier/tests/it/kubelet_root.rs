//! A kubelet whose `cgroupRoot` is not `/` (kind: `cgroupRoot: /kubelet`): the binary finds the
//! pod cgroups below it, detected or from `--kubelet-cgroup-root`, writes there, and leaves a
//! decoy `kubepods` tree elsewhere untouched. Two candidate trees are refused at start.

use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::layout::{KubeQos, Layout};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Controller};
use koord_translator::pod::spec_view::PodSpecView;

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Kernel, fixture, fixture_path, make_pod_tree, snapshot};

/// `koord-applier once -f ls-redis.json --cgroup-root ROOT --cgroup-version V ARGS...`: exit
/// code, stdout as JSON (Null when it is not JSON) and stderr.
fn once(root: &Path, version: CgroupVersion, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args(["once", "-f", &fixture_path("ls-redis.json")])
        .arg("--cgroup-root")
        .arg(root)
        .args(["--cgroup-version", &version.to_string()])
        .args(extra)
        .output()
        .expect("run binary");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn view() -> PodSpecView {
    PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view")
}

fn kernel(version: CgroupVersion) -> Kernel {
    match version {
        CgroupVersion::V1 => Kernel::AlibabaV1,
        CgroupVersion::V2 => Kernel::MainlineV2,
    }
}

/// The pod's tree as a kubelet with `cgroupRoot: kubelet_root` makes it under `root`.
fn kubelet_tree(
    root: &Path,
    version: CgroupVersion,
    driver: CgroupDriver,
    kubelet_root: &str,
) -> Layout {
    let l = Layout::new(root, version, driver)
        .with_kubelet_root(KubeletRoot::parse(kubelet_root).expect("root"));
    make_pod_tree(&l, kernel(version), &view());
    l
}

/// The pod cgroup's `memory.min` (the annotation's pod-level value once applied).
fn pod_memory_min(l: &Layout) -> PathBuf {
    let rel = l.pod_dir(&view().uid, KubeQos::Burstable).expect("pod dir");
    l.dir(&rel, Controller::Memory)
        .expect("dir")
        .join("memory.min")
}

/// The layout's `kubepods` directory under each controller the trees seed.
fn kubepods_dirs(l: &Layout) -> Vec<PathBuf> {
    [Controller::Memory, Controller::Cpu]
        .map(|c| l.dir(&l.kubepods_dir(), c).expect("dir"))
        .to_vec()
}

/// Every knob and ancestor file the report names is below one of `prefixes`, and something
/// was written.
fn assert_all_below(report: &serde_json::Value, prefixes: &[PathBuf], what: &str) {
    let below = |path: &str| prefixes.iter().any(|p| Path::new(path).starts_with(p));
    assert_eq!(report["status"], "applied", "{what}: {report}");
    let knobs = report["knobs"].as_array().expect("knobs");
    assert!(!knobs.is_empty(), "{what}");
    for k in knobs {
        let path = k["path"].as_str().expect("path");
        assert!(below(path), "{what}: {path}");
    }
    assert!(
        knobs.iter().any(|k| k["outcome"] == "written"),
        "{what}: nothing written"
    );
    let cgroups = report["ancestors"]["cgroups"]
        .as_array()
        .expect("ancestors");
    assert!(!cgroups.is_empty(), "{what}");
    for a in cgroups {
        let path = a["path"].as_str().expect("path");
        assert!(below(path), "{what}: {path}");
    }
}

/// Everything below the decoy's `kubepods` directories, to prove nothing there changed.
fn snapshot_all(dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
    dirs.iter().flat_map(|d| snapshot(d)).collect()
}

/// Detected: kind's systemd tree (`kubelet.slice/kubelet-kubepods.slice`) and a cgroupfs one
/// (`kubelet/kubepods`), v2 and v1. The decoy is a full copy of the pod's tree deeper than the
/// search reaches (a kubelet nested in a container on this node is not this node's kubelet).
#[test]
fn detected_kubelet_root_is_written_and_a_decoy_is_not() {
    let cases = [
        (
            CgroupVersion::V2,
            CgroupDriver::Systemd,
            "kubelet.slice/kubelet-kubepods.slice",
        ),
        (
            CgroupVersion::V2,
            CgroupDriver::Cgroupfs,
            "kubelet/kubepods",
        ),
        (
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs,
            "memory/kubelet/kubepods",
        ),
        (
            CgroupVersion::V1,
            CgroupDriver::Systemd,
            "memory/kubelet.slice/kubelet-kubepods.slice",
        ),
    ];
    for (version, driver, kubepods) in cases {
        let what = format!("{version} {driver}");
        let tmp = tempfile::tempdir().expect("tmp");
        let l = kubelet_tree(tmp.path(), version, driver, "/kubelet");
        let decoy_root = tmp.path().join("system.slice/containerd.service/nested");
        let decoy = kubepods_dirs(&kubelet_tree(&decoy_root, version, driver, "/"));
        let decoy_before = snapshot_all(&decoy);

        let (code, report, stderr) = once(tmp.path(), version, &[]);
        assert_eq!(code, 0, "{what}: {stderr}");
        assert_eq!(report["kubeletCgroupRoot"], "/kubelet", "{what}");
        assert_eq!(report["cgroupDriver"], driver.to_string(), "{what}");
        assert!(
            stderr.contains("kubelet cgroup tree detected") && stderr.contains("/kubelet"),
            "{what}: the detection is logged: {stderr}"
        );
        assert!(
            tmp.path().join(kubepods).is_dir(),
            "{what}: the case's own path"
        );
        assert_eq!(kubepods_dirs(&l)[0], tmp.path().join(kubepods), "{what}");
        assert_all_below(&report, &kubepods_dirs(&l), &what);
        assert_ne!(
            common::read(&pod_memory_min(&l)),
            "0",
            "{what}: the pod's memory.min is written below the kubelet root"
        );
        assert_eq!(
            snapshot_all(&decoy),
            decoy_before,
            "{what}: decoy untouched"
        );
    }
}

/// The flag wins over a decoy `kubepods` at the top of the hierarchy (which detection alone
/// would take as the kubelet's): the files below `kubelet/kubepods` are written, the decoy's not.
#[test]
fn flag_kubelet_root_wins_over_a_decoy_at_the_top() {
    for version in [CgroupVersion::V2, CgroupVersion::V1] {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = kubelet_tree(tmp.path(), version, CgroupDriver::Cgroupfs, "/kubelet");
        let decoy = kubepods_dirs(&kubelet_tree(
            tmp.path(),
            version,
            CgroupDriver::Cgroupfs,
            "/",
        ));
        let decoy_before = snapshot_all(&decoy);

        let (code, report, stderr) =
            once(tmp.path(), version, &["--kubelet-cgroup-root", "/kubelet"]);
        assert_eq!(code, 0, "{version}: {stderr}");
        assert_eq!(report["kubeletCgroupRoot"], "/kubelet");
        assert_eq!(
            report["cgroupDriver"], "cgroupfs",
            "driver found below the root"
        );
        assert_all_below(&report, &kubepods_dirs(&l), "flag");
        assert_ne!(common::read(&pod_memory_min(&l)), "0");
        assert_eq!(
            snapshot_all(&decoy),
            decoy_before,
            "{version}: decoy untouched"
        );

        // The environment variable is the same setting.
        let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
            .args(["once", "-f", &fixture_path("ls-redis.json"), "--dry-run"])
            .arg("--cgroup-root")
            .arg(tmp.path())
            .args(["--cgroup-version", &version.to_string()])
            .env("KOORD_KUBELET_CGROUP_ROOT", "/kubelet")
            .output()
            .expect("run binary");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(json["kubeletCgroupRoot"], "/kubelet");
    }
}

/// Two kubepods trees below the root and no flag: a startup error naming both and the flag,
/// and nothing written anywhere.
#[test]
fn two_candidate_roots_are_refused_with_the_flag_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    kubelet_tree(
        tmp.path(),
        CgroupVersion::V2,
        CgroupDriver::Cgroupfs,
        "/kubelet",
    );
    kubelet_tree(
        tmp.path(),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
        "/other",
    );
    let before = snapshot(tmp.path());
    let (code, report, stderr) = once(tmp.path(), CgroupVersion::V2, &[]);
    assert_ne!(code, 0, "{stderr}");
    assert_eq!(report, serde_json::Value::Null, "no report: {report}");
    for part in [
        "kubelet/kubepods (cgroupRoot /kubelet, cgroupfs)",
        "other.slice/other-kubepods.slice (cgroupRoot /other, systemd)",
        "--kubelet-cgroup-root",
    ] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    assert_eq!(snapshot(tmp.path()), before, "nothing written");
}

/// A malformed flag stops the binary before anything is read, naming the flag and the form.
#[test]
fn malformed_flag_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    for bad in ["kubelet", "/kubelet/..", "/a//b"] {
        let (code, _, stderr) = once(
            tmp.path(),
            CgroupVersion::V2,
            &["--kubelet-cgroup-root", bad],
        );
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(
            stderr.contains("--kubelet-cgroup-root") && stderr.contains("`/name[/name...]`"),
            "{bad}: {stderr}"
        );
    }
}

/// The cgroupRoot's own `memory.min`/`memory.low` cap every pod's protection: 0 there is
/// warned about (naming the file), a value there is not; the applier never writes them.
#[test]
fn zero_protection_above_kubepods_is_warned_and_left_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    kubelet_tree(
        tmp.path(),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
        "/kubelet",
    );
    let above = tmp.path().join("kubelet.slice");
    std::fs::write(above.join("memory.min"), "0\n").expect("seed");
    std::fs::write(above.join("memory.low"), "1073741824\n").expect("seed");
    let (code, _, stderr) = once(tmp.path(), CgroupVersion::V2, &[]);
    assert_eq!(code, 0, "{stderr}");
    let min = above.join("memory.min").display().to_string();
    let low = above.join("memory.low").display().to_string();
    assert!(
        stderr.contains("0 above kubepods") && stderr.contains(&min),
        "memory.min warned: {stderr}"
    );
    assert!(!stderr.contains(&low), "memory.low holds a value: {stderr}");
    assert_eq!(common::read(&above.join("memory.min")), "0", "not written");
    assert_eq!(common::read(&above.join("memory.low")), "1073741824");

    std::fs::write(above.join("memory.min"), "1073741824\n").expect("seed");
    let (_, _, stderr) = once(tmp.path(), CgroupVersion::V2, &[]);
    assert!(!stderr.contains("0 above kubepods"), "{stderr}");
}
