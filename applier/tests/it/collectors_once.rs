//! `koord-applier once -f POD --collect` end to end (the binary), and the collector flags.

use crate::common;

use std::process::Command;

use clap::Parser as _;
use common::collectors::{cid, pod, series};
use koord_applier::cli::Cli;
use koord_applier::config::Config;
use koord_applier::node::collectors::CollectorConfig;

const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const FULL: &str = "some avg10=1.50 avg60=2.25 avg300=3.00 total=100\nfull avg10=0.50 avg60=0.75 avg300=1.00 total=50\n";

#[test]
fn flags_as_the_reference() {
    let collectors = |args: &[&str]| {
        let argv = ["koord-applier", "run", "--node-name", "n1"]
            .iter()
            .chain(args);
        let cli = Cli::try_parse_from(argv).expect("parses");
        Config::from_cli(&cli).map(|(c, _)| c.collectors)
    };
    let c = collectors(&[
        "--feature-gates=CPICollector=true,PSICollector=true",
        "--cpi-collector-interval-seconds",
        "30",
        "--collect-cpi-timewindow-seconds",
        "5",
        "--psi-collector-interval-seconds",
        "15",
    ])
    .expect("valid");
    assert!(c.cpi && c.psi);
    assert_eq!(
        (
            c.cpi_interval.as_secs(),
            c.cpi_window.as_secs(),
            c.psi_interval.as_secs()
        ),
        (30, 5, 15)
    );
    // Defaults: both off in `run`, the reference's intervals.
    assert_eq!(collectors(&[]), Ok(CollectorConfig::disabled()));
    assert!(collectors(&["--feature-gates", "Bogus=true"]).is_err());
    assert!(
        Cli::try_parse_from(["koord-applier", "once", "-f", "x", "--collect-serve", ":1"]).is_err(),
        "--collect-serve requires --collect"
    );
}

#[test]
fn once_collect_prints_the_prometheus_text() {
    let tmp = tempfile::tempdir().expect("tmp");
    let a = cid(0xa);
    let pod_dir = tmp.path().join(format!("kubepods/burstable/pod{UID}"));
    for d in [pod_dir.clone(), pod_dir.join(&a)] {
        std::fs::create_dir_all(&d).expect("mkdir");
        for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
            std::fs::write(d.join(f), FULL).expect("write");
        }
    }
    let file = tmp.path().join("pod.json");
    std::fs::write(
        &file,
        serde_json::to_string(&pod(UID, "web-0", &[("app", &a)], "1")).expect("json"),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .args(["--cgroup-root"])
        .arg(tmp.path())
        .args([
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "cgroupfs",
            "--collect-cpi-timewindow-seconds",
            "1",
            "once",
            "--collect",
            "-f",
        ])
        .arg(&file)
        .output()
        .expect("run koord-applier");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(series(&text, "koordlet_pod_psi{").len(), 18, "\n{text}");
    assert_eq!(
        series(&text, "koordlet_container_psi{").len(),
        18,
        "\n{text}"
    );
    let line = format!(
        "koordlet_container_psi{{container_id=\"containerd://{a}\",container_name=\"app\",cpu_full_supported=\"true\",node=\"node-a\",pod_name=\"web-0\",pod_namespace=\"shop\",pod_uid=\"{UID}\",psi_degree=\"full\",psi_precision=\"avg60\",psi_resource_type=\"io\"}} 0.75"
    );
    assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    // CPI is on too (no gate named): either counted or, without a PMU, said unsupported.
    assert!(
        text.contains("koord_applier_cpi_collector_supported "),
        "\n{text}"
    );
    // Nothing was applied: `--collect` does not write cgroups or print a JSON report.
    assert!(!text.contains("\"status\""));

    // A gate switched off drops its families.
    let out = Command::new(env!("CARGO_BIN_EXE_koord-applier"))
        .arg("--cgroup-root")
        .arg(tmp.path())
        .args([
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "cgroupfs",
            "--feature-gates=CPICollector=false",
            "once",
            "--collect",
            "-f",
        ])
        .arg(&file)
        .output()
        .expect("run koord-applier");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!text.contains("cpi"), "\n{text}");
    assert_eq!(series(&text, "koordlet_pod_psi{").len(), 18);
}
