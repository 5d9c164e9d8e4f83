//! PSI collection on temporary trees (v2 with and without `full` lines, v1 Alibaba `cpuacct/`,
//! v1 hybrid `unified/`, missing files) and on this machine's real cgroup v2 pressure files. The
//! exposition text is compared series by series.

use crate::common;

use std::path::Path;

use common::collectors::{RealTree, cid, pod, require_unified_psi, scrape, series};
use koord_applier::node::collectors::CollectorMetrics;
use koord_translator::cgroup::file as cgroup_file;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

/// What `/metrics` would say: the registry (health gauges) and the per-cgroup families.
use koord_applier::node::collectors::{Collector, CollectorConfig};
use koord_applier::node::shared::psi::{self, Resource};
use prometheus::Registry;

const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";
const FULL: &str = "some avg10=1.50 avg60=2.25 avg300=3.00 total=100\nfull avg10=0.50 avg60=0.75 avg300=1.00 total=50\n";
const SOME_ONLY: &str = "some avg10=4.00 avg60=5.00 avg300=6.00 total=7\n";

fn psi_config() -> CollectorConfig {
    CollectorConfig {
        psi: true,
        ..CollectorConfig::disabled()
    }
}

fn collector(root: &Path, version: CgroupVersion) -> (Collector, Registry) {
    let registry = Registry::new();
    let m = CollectorMetrics::register(&registry, true, false).expect("register");
    let layout = Layout::new(root, version, CgroupDriver::Cgroupfs);
    let c = Collector::new(layout, "node-a", m, &psi_config(), Path::new("/sys"));
    (c, registry)
}

fn write_files(dir: &Path, cpu: Option<&str>, mem: Option<&str>, io: Option<&str>) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for (f, t) in [
        ("cpu.pressure", cpu),
        ("memory.pressure", mem),
        ("io.pressure", io),
    ] {
        if let Some(t) = t {
            std::fs::write(dir.join(f), t).expect("write");
        }
    }
}

/// The expected lines of one cgroup's resource: three `some`, and three `full` if given.
fn expect_lines(
    family: &str,
    ids: &str,
    res: &str,
    some: [&str; 3],
    full: Option<[&str; 3]>,
) -> Vec<String> {
    let sup = if full.is_some() { "true" } else { "false" };
    let mut out = Vec::new();
    for (degree, vals) in [("some", Some(some)), ("full", full)] {
        let Some(vals) = vals else { continue };
        for (p, v) in ["avg10", "avg60", "avg300"].iter().zip(vals) {
            out.push(format!(
                "{family}{{{ids_pre}cpu_full_supported=\"{sup}\",{ids_mid}psi_degree=\"{degree}\",psi_precision=\"{p}\",psi_resource_type=\"{res}\"}} {v}",
                ids_pre = ids.split("|").next().unwrap_or(""),
                ids_mid = ids.split("|").nth(1).unwrap_or(""),
            ));
        }
    }
    out
}

#[test]
fn temp_tree_v2_series_by_series() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pod_dir = tmp.path().join(format!("kubepods/burstable/pod{UID}"));
    let (a, b) = (cid(0xa), cid(0xb));
    // Pod: full lines everywhere. Container app: CPU without a full line (pre-5.13 kernel),
    // memory and io with. Container side: no pressure files at all.
    write_files(&pod_dir, Some(FULL), Some(FULL), Some(FULL));
    write_files(&pod_dir.join(&a), Some(SOME_ONLY), Some(FULL), Some(FULL));
    std::fs::create_dir_all(pod_dir.join(&b)).expect("mkdir");

    let (mut c, registry) = collector(tmp.path(), CgroupVersion::V2);
    let p = pod(UID, "web-0", &[("app", &a), ("side", &b)], "1");
    c.sync([&p]);
    let round = c.collect_psi();
    assert_eq!((round.read, round.unavailable), (2, 1), "{round:?}");
    let text = scrape(&registry, &c);

    // Pod series: labels sorted by name in the exposition.
    let pod_ids =
        format!("|node=\"node-a\",pod_name=\"web-0\",pod_namespace=\"shop\",pod_uid=\"{UID}\",");
    let mut want = Vec::new();
    for res in ["cpu", "mem", "io"] {
        want.extend(expect_lines(
            "koordlet_pod_psi",
            &pod_ids,
            res,
            ["1.5", "2.25", "3"],
            Some(["0.5", "0.75", "1"]),
        ));
    }
    want.sort();
    assert_eq!(series(&text, "koordlet_pod_psi{"), want, "\n{text}");

    let ctr_pre = format!("container_id=\"containerd://{a}\",container_name=\"app\",");
    let ctr_ids = format!(
        "{ctr_pre}|node=\"node-a\",pod_name=\"web-0\",pod_namespace=\"shop\",pod_uid=\"{UID}\","
    );
    let mut want = expect_lines(
        "koordlet_container_psi",
        &ctr_ids,
        "cpu",
        ["4", "5", "6"],
        None,
    );
    for res in ["mem", "io"] {
        want.extend(expect_lines(
            "koordlet_container_psi",
            &ctr_ids,
            res,
            ["1.5", "2.25", "3"],
            Some(["0.5", "0.75", "1"]),
        ));
    }
    want.sort();
    assert_eq!(series(&text, "koordlet_container_psi{"), want, "\n{text}");
    assert!(
        !text.contains("container_name=\"side\""),
        "no series for a cgroup without PSI files"
    );
    assert!(text.contains("# HELP koordlet_container_psi Container psi collected by koordlet"));
    assert!(text.contains("# HELP koordlet_pod_psi Pod psi collected by koordlet"));
    assert!(text.contains("# TYPE koordlet_pod_psi gauge"));
    assert!(text.contains("koord_applier_psi_unavailable_cgroups 1"));

    // Values follow the files; a second round with unchanged pods keeps the same series.
    std::fs::write(
        pod_dir.join(&a).join("cpu.pressure"),
        "some avg10=9.00 avg60=5.00 avg300=6.00 total=8\n",
    )
    .expect("write");
    c.sync([&p]);
    c.collect_psi();
    let text = scrape(&registry, &c);
    assert!(text.contains(&format!("koordlet_container_psi{{{ctr_pre}cpu_full_supported=\"false\",node=\"node-a\",pod_name=\"web-0\",pod_namespace=\"shop\",pod_uid=\"{UID}\",psi_degree=\"some\",psi_precision=\"avg10\",psi_resource_type=\"cpu\"}} 9")), "\n{text}");
    assert_eq!(series(&text, "koordlet_").len(), 18 + 15);

    // The files appear for `side` later: it is picked up without a restart.
    write_files(&pod_dir.join(&b), Some(FULL), Some(FULL), Some(FULL));
    c.collect_psi();
    assert!(scrape(&registry, &c).contains("container_name=\"side\""));

    // The pod leaves: every one of its series goes.
    c.sync(std::iter::empty());
    let text = scrape(&registry, &c);
    assert!(
        series(&text, "koordlet_container_psi{").is_empty(),
        "\n{text}"
    );
    assert!(series(&text, "koordlet_pod_psi{").is_empty(), "\n{text}");
}

#[test]
fn labels_come_from_the_pod_not_the_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pod_dir = tmp.path().join(format!("kubepods/burstable/pod{UID}"));
    // A file whose content tries to smuggle label text is refused, not echoed.
    let evil = "some avg10=1.00 avg60=1.00 avg300=1.00 total=1\nfull{pod_name=\"x\"} avg10=1\n";
    write_files(&pod_dir, Some(evil), Some(FULL), Some(FULL));
    let (mut c, registry) = collector(tmp.path(), CgroupVersion::V2);
    // A container ID with path characters is refused: no cgroup path is built from it.
    let mut p = pod(UID, "web-0", &[("app", &cid(1))], "1");
    if let Some(cs) = p
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        cs[0].container_id = Some("containerd://../../../../etc".into());
    }
    c.sync([&p]);
    let round = c.collect_psi();
    assert_eq!(
        (round.read, round.unavailable),
        (0, 1),
        "only the pod cgroup is followed"
    );
    let text = scrape(&registry, &c);
    assert!(
        !text.contains("psi_resource_type=\"cpu\""),
        "malformed cpu.pressure exposes nothing\n{text}"
    );
    assert!(text.contains("psi_resource_type=\"mem\""));
    assert!(!text.contains("etc"), "\n{text}");
    assert!(!text.contains("pod_name=\"x\""));
    assert_eq!(c.counts(), (1, 0));
}

#[test]
fn pod_changes_and_renames_follow_resource_version() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pod_dir = tmp.path().join(format!("kubepods/burstable/pod{UID}"));
    let (a, b) = (cid(0xa), cid(0xb));
    write_files(&pod_dir, Some(FULL), Some(FULL), Some(FULL));
    write_files(&pod_dir.join(&a), Some(FULL), Some(FULL), Some(FULL));
    write_files(&pod_dir.join(&b), Some(FULL), Some(FULL), Some(FULL));
    let (mut c, registry) = collector(tmp.path(), CgroupVersion::V2);
    c.sync([&pod(UID, "web-0", &[("app", &a)], "1")]);
    c.collect_psi();
    assert!(scrape(&registry, &c).contains(&format!("containerd://{a}")));
    // The container restarted with a new ID: the old container's series go, the new come.
    c.sync([&pod(UID, "web-0", &[("app", &b)], "2")]);
    c.collect_psi();
    let text = scrape(&registry, &c);
    assert!(!text.contains(&format!("containerd://{a}")), "\n{text}");
    assert_eq!(series(&text, "koordlet_container_psi{").len(), 18);
    // A finished pod is dropped like a deleted one.
    let mut done = pod(UID, "web-0", &[("app", &b)], "3");
    if let Some(s) = done.status.as_mut() {
        s.phase = Some("Succeeded".into());
    }
    c.sync([&done]);
    assert!(series(&scrape(&registry, &c), "koordlet_").is_empty());
    assert_eq!(c.counts(), (0, 0));
}

#[test]
fn v1_alibaba_reads_cpuacct_hybrid_reads_unified_plain_v1_stays_quiet() {
    let tmp = tempfile::tempdir().expect("tmp");
    let a = cid(0xa);
    let rel = format!("kubepods/burstable/pod{UID}");
    let acct = tmp.path().join("cpuacct");
    write_files(&acct.join("kubepods"), Some(FULL), Some(FULL), Some(FULL));
    write_files(&acct.join(&rel), Some(FULL), Some(SOME_ONLY), Some(FULL));
    write_files(
        &acct.join(&rel).join(&a),
        Some(FULL),
        Some(FULL),
        Some(FULL),
    );
    let (mut c, registry) = collector(tmp.path(), CgroupVersion::V1);
    assert!(c.psi_active());
    c.sync([&pod(UID, "web-0", &[("app", &a)], "1")]);
    assert_eq!(c.collect_psi().read, 2);
    let text = scrape(&registry, &c);
    assert_eq!(
        series(&text, "koordlet_pod_psi{").len(),
        15,
        "mem without full: 3 series\n{text}"
    );
    assert_eq!(series(&text, "koordlet_container_psi{").len(), 18);

    // Hybrid host (mainline v1 + cgroup2 at unified/): no cpuacct pressure files, the
    // unified tree has them; Alibaba's cpuacct/ still wins where both exist (above).
    let hybrid = tempfile::tempdir().expect("tmp");
    let uni = hybrid.path().join("unified");
    std::fs::create_dir_all(hybrid.path().join("cpuacct/kubepods")).expect("mkdir");
    write_files(&uni.join("kubepods"), Some(FULL), Some(FULL), Some(FULL));
    write_files(&uni.join(&rel), Some(FULL), Some(FULL), Some(FULL));
    write_files(&uni.join(&rel).join(&a), Some(FULL), Some(FULL), Some(FULL));
    let (mut c, registry) = collector(hybrid.path(), CgroupVersion::V1);
    assert!(c.psi_active());
    c.sync([&pod(UID, "web-0", &[("app", &a)], "1")]);
    assert_eq!(c.collect_psi().read, 2);
    let text = scrape(&registry, &c);
    assert_eq!(series(&text, "koordlet_pod_psi{").len(), 18, "{text}");
    assert_eq!(series(&text, "koordlet_container_psi{").len(), 18);

    // Mainline v1 without a cgroup2 mount: no pressure files anywhere: the collector is idle.
    let plain = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(plain.path().join("cpuacct/kubepods")).expect("mkdir");
    let (mut c, registry) = collector(plain.path(), CgroupVersion::V1);
    assert!(!c.psi_active());
    c.sync([&pod(UID, "web-0", &[("app", &a)], "1")]);
    assert_eq!(c.collect_psi(), Default::default());
    assert!(series(&scrape(&registry, &c), "koordlet_").is_empty());
}

#[test]
#[ignore = "needs root and cgroup v2 at /sys/fs/cgroup/unified with PSI files"]
fn real_unified_root_files_parse() {
    require_unified_psi();
    let dir = cgroup_file::open_dir(Path::new(common::collectors::UNIFIED)).expect("open");
    for res in Resource::ALL {
        let got = psi::read_resource(&dir, res).expect("read real pressure file");
        let text = std::fs::read_to_string(Path::new(common::collectors::UNIFIED).join(res.file()))
            .expect("read");
        let parsed = psi::parse(&text).expect("parse");
        // Totals only grow; averages are percentages.
        assert!(parsed.some.total_us >= got.some.total_us, "{res:?}");
        for v in got.some.avgs() {
            assert!((0.0..=100.0).contains(&v), "{res:?} {v}");
        }
        assert_eq!(got.full.is_some(), text.contains("full "), "{res:?}");
    }
}

#[test]
#[ignore = "needs root and cgroup v2 at /sys/fs/cgroup/unified with PSI files"]
fn real_unified_child_cgroups_with_a_busy_process() {
    let _cpu = common::cpu_measurement();
    require_unified_psi();
    let mut tree = RealTree::new();
    let (a, b) = (cid(0xa), cid(0xb));
    let pod_rel = format!("kubepods/burstable/pod{UID}");
    let dir_a = tree.mkdir(&Path::new(&pod_rel).join(&a));
    tree.mkdir(&Path::new(&pod_rel).join(&b));
    tree.spawn_busy(&dir_a);
    tree.spawn_busy(&dir_a);
    tree.spawn_busy(&dir_a);
    // Three spinning shells on two CPUs: CPU pressure appears in the averages within seconds.
    std::thread::sleep(std::time::Duration::from_secs(3));

    let (mut c, registry) = collector(&tree.root, CgroupVersion::V2);
    c.sync([&pod(UID, "web-0", &[("app", &a), ("idle", &b)], "1")]);
    let round = c.collect_psi();
    assert_eq!((round.read, round.unavailable), (3, 0));
    let text = scrape(&registry, &c);
    // This kernel (>= 5.13) has full lines for every resource of a non-root cgroup.
    let pod_lines = series(&text, "koordlet_pod_psi{");
    let ctr_lines = series(&text, "koordlet_container_psi{");
    assert_eq!(pod_lines.len(), 18, "\n{text}");
    assert_eq!(ctr_lines.len(), 36, "\n{text}");
    for l in pod_lines.iter().chain(&ctr_lines) {
        assert!(l.contains("cpu_full_supported=\"true\""), "{l}");
        assert!(l.contains(&format!("pod_uid=\"{UID}\"")), "{l}");
    }
    let value = |needle: &str| -> f64 {
        ctr_lines
            .iter()
            .find(|l| {
                l.contains(needle)
                    && l.contains("psi_resource_type=\"cpu\"")
                    && l.contains("psi_degree=\"some\"")
                    && l.contains("psi_precision=\"avg10\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let busy = value("container_name=\"app\"");
    let idle = value("container_name=\"idle\"");
    assert!(
        busy > 1.0,
        "three spinners on two CPUs stall: cpu some avg10 = {busy}"
    );
    assert_eq!(idle, 0.0, "an empty cgroup never stalls");
    // The pod cgroup holds the spinners too: it stalls as much as its busy container.
    let pod_cpu = pod_lines
        .iter()
        .find(|l| {
            l.contains("psi_resource_type=\"cpu\"")
                && l.contains("psi_degree=\"some\"")
                && l.contains("psi_precision=\"avg10\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    assert!(pod_cpu > 1.0, "pod cpu some avg10 = {pod_cpu}");
}
