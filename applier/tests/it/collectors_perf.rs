//! perf plumbing for real: counter groups in cgroup mode on a child of this machine's cgroup
//! v2 hierarchy, counting software clocks through the CPI collector's own code path (the
//! event type is the only difference from cycles/instructions), and the no-PMU path as it
//! happens on a machine without hardware counters.

use crate::common;

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use common::collectors::{RealTree, cid, pod, scrape, series, unified_psi_missing};
use koord_applier::node::collectors::CollectorMetrics;
use koord_applier::node::collectors::cpi::{self, CPI_EVENTS, PmuStatus};
use koord_translator::cgroup::file as cgroup_file;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

/// What `/metrics` would say: the registry (health gauges) and the per-cgroup families.
use koord_applier::node::collectors::perf_sys::{CounterGroup, Event};
use koord_applier::node::collectors::{Collector, CollectorConfig};
use prometheus::Registry;

const UID: &str = "3440fb9c-423b-48e9-8850-06a6c50f633d";
const SW: [Event; 2] = [Event::TaskClock, Event::CpuClock];

fn cpi_config() -> CollectorConfig {
    CollectorConfig {
        cpi: true,
        cpi_window: Duration::from_secs(1),
        ..CollectorConfig::disabled()
    }
}

/// Whether cgroup-mode software counting works here (root, a v2 hierarchy, perf enabled).
fn perf_cgroup_missing() -> Option<String> {
    if let Some(r) = unified_psi_missing() {
        return Some(r);
    }
    let dir = cgroup_file::open_dir(Path::new(common::collectors::UNIFIED)).ok()?;
    match CounterGroup::open_cgroup(dir.as_fd(), 0, &SW) {
        Ok(_) => None,
        Err(e) => Some(format!("cgroup-mode software counters refused: {e}")),
    }
}

fn cpi_collector() -> (Registry, Collector) {
    let registry = Registry::new();
    let m = CollectorMetrics::register(&registry, false, true).expect("register");
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = Layout::new(tmp.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let c = Collector::new(layout, "node-a", m, &cpi_config(), Path::new("/sys"));
    (registry, c)
}

#[test]
#[ignore = "needs an x86_64 machine with a PMU (/sys/bus/event_source/devices/cpu)"]
fn needs_pmu_cpi_probe_reports_supported() {
    assert_eq!(
        machine_has_no_pmu(),
        Some(false),
        "needs an x86_64 machine with a PMU (/sys/bus/event_source/devices/cpu)"
    );
    let (registry, c) = cpi_collector();
    assert_eq!(cpi::probe(&CPI_EVENTS), PmuStatus::Supported);
    assert!(c.cpi_active());
    assert!(scrape(&registry, &c).contains("koord_applier_cpi_collector_supported 1"));
}

/// The x86 core PMU registers as `cpu` in the event-source bus; without it there are no
/// hardware events. An oracle independent of the code under test.
fn machine_has_no_pmu() -> Option<bool> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    Some(!Path::new("/sys/bus/event_source/devices/cpu").exists())
}

#[test]
#[ignore = "needs root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters"]
fn counter_groups_count_a_real_cgroup() {
    let _cpu = common::cpu_measurement();
    common::real_v1::require(
        "root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters",
        perf_cgroup_missing(),
    );
    let mut tree = RealTree::new();
    let busy = tree.mkdir(Path::new("busy"));
    let idle = tree.mkdir(Path::new("idle"));
    let spinner = tree.spawn_busy(&busy);
    let cpus = cpi::online_cpus(Path::new("/sys"));
    let open = |dir: &Path| {
        let fd = cgroup_file::open_dir(dir).expect("open cgroup dir");
        cpus.iter()
            .map(|&c| CounterGroup::open_cgroup(fd.as_fd(), c, &SW).expect("open group"))
            .collect::<Vec<_>>()
    };
    let (gb, gi) = (open(&busy), open(&idle));
    let before = on_cpu_ns(spinner);
    for g in gb.iter().chain(&gi) {
        g.reset_and_enable().expect("enable");
    }
    std::thread::sleep(Duration::from_secs(1));
    let read = |gs: &[CounterGroup]| {
        let rs: Vec<_> = gs
            .iter()
            .map(|g| {
                g.disable().expect("disable");
                g.read().expect("read")
            })
            .collect();
        cpi::sum_scaled::<2>(&rs).expect("measured")
    };
    let [busy_ns, _] = read(&gb);
    let spent = on_cpu_ns(spinner).saturating_sub(before);
    let [idle_ns, _] = read(&gi);
    // The counters must agree with the scheduler's own account of the spinner's CPU time over
    // the window (however much a loaded machine gave it), and never exceed the window.
    let max = 1_100_000_000 * u64::try_from(cpus.len()).expect("cpus");
    assert!(busy_ns > 0 && busy_ns < max, "task-clock {busy_ns} ns");
    assert!(
        busy_ns * 3 >= spent * 2 && busy_ns <= spent * 3 / 2 + 50_000_000,
        "task-clock {busy_ns} ns vs {spent} ns the spinner spent on CPU"
    );
    assert_eq!(idle_ns, 0, "nothing runs in the idle cgroup");
}

#[test]
#[ignore = "needs root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters"]
fn cpi_collector_on_real_cgroups_with_software_events() {
    let _cpu = common::cpu_measurement();
    common::real_v1::require(
        "root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters",
        perf_cgroup_missing(),
    );
    let mut tree = RealTree::new();
    let (a, b) = (cid(0xa), cid(0xb));
    let pod_rel = Path::new("kubepods/burstable").join(format!("pod{UID}"));
    let dir_a = tree.mkdir(&pod_rel.join(&a));
    tree.mkdir(&pod_rel.join(&b));
    let spinner = tree.spawn_busy(&dir_a);

    let registry = Registry::new();
    let m = CollectorMetrics::register(&registry, false, true).expect("register");
    let layout = Layout::new(&tree.root, CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let mut c =
        Collector::new(layout, "node-a", m, &cpi_config(), Path::new("/sys")).with_cpi_events(SW);
    assert!(c.cpi_active());
    c.sync([&pod(
        UID,
        "koordlet-x8g2j",
        &[("app", &a), ("idle", &b)],
        "1",
    )]);
    let before = on_cpu_ns(spinner);
    c.collect_cpi_blocking(Duration::from_secs(1));
    let spent = on_cpu_ns(spinner).saturating_sub(before) as f64;
    let text = scrape(&registry, &c);
    assert!(text.contains("# HELP koordlet_container_cpi Container cpi collected by koordlet"));
    assert!(
        text.contains("koord_applier_cpi_collector_supported 1"),
        "\n{text}"
    );
    let lines = series(&text, "koordlet_container_cpi{");
    assert_eq!(lines.len(), 4, "\n{text}");
    let value = |name: &str, field: &str| -> f64 {
        let prefix = format!(
            "koordlet_container_cpi{{container_id=\"containerd://{}\",container_name=\"{name}\",cpi_field=\"{field}\",node=\"node-a\",pod_name=\"koordlet-x8g2j\",pod_namespace=\"shop\",pod_uid=\"{UID}\"}} ",
            if name == "app" { &a } else { &b }
        );
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {prefix}\n{text}"))
    };
    // "cycles" holds the leader's count (task-clock ns here), "instructions" the member's.
    let busy = value("app", "cycles");
    // Against the scheduler's own account of the spinner's CPU time, so load cannot flake it.
    assert!(
        busy > 0.0 && busy < 2.5e9 && busy >= spent * 0.66 && busy <= spent * 1.5 + 5e7,
        "task-clock of the busy container: {busy} ns, spinner on CPU {spent} ns"
    );
    assert!(value("app", "instructions") > 0.0);
    assert_eq!(value("idle", "cycles"), 0.0);
    assert_eq!(value("idle", "instructions"), 0.0);

    // The pod leaves: its CPI series go.
    c.sync(std::iter::empty());
    assert!(series(&scrape(&registry, &c), "koordlet_container_cpi{").is_empty());
}

#[test]
#[ignore = "needs an x86_64 machine without a PMU"]
fn no_pmu_is_detected_at_start_and_cpi_stays_quiet() {
    assert_eq!(
        machine_has_no_pmu(),
        Some(true),
        "needs an x86_64 machine without a PMU (/sys/bus/event_source/devices/cpu absent)"
    );
    let (registry, mut c) = cpi_collector();
    assert!(
        matches!(cpi::probe(&CPI_EVENTS), PmuStatus::NoPmu(_)),
        "{:?}",
        cpi::probe(&CPI_EVENTS)
    );
    assert!(!c.cpi_active());
    c.sync([&pod(UID, "p", &[("app", &cid(1))], "1")]);
    assert!(c.start_cpi().is_none(), "no window opens without a PMU");
    let text = scrape(&registry, &c);
    assert!(
        text.contains("koord_applier_cpi_collector_supported 0"),
        "\n{text}"
    );
    assert!(series(&text, "koordlet_container_cpi{").is_empty());
}

#[test]
#[ignore = "needs root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters"]
fn cpi_round_split_into_windows_covers_every_container() {
    let _cpu = common::cpu_measurement();
    common::real_v1::require(
        "root, cgroup v2 at /sys/fs/cgroup/unified and cgroup-mode perf software counters",
        perf_cgroup_missing(),
    );
    let mut tree = RealTree::new();
    let ids: Vec<String> = (1..=3).map(cid).collect();
    let pod_rel = Path::new("kubepods/burstable").join(format!("pod{UID}"));
    let spinners: Vec<u32> = ids
        .iter()
        .map(|id| {
            let dir = tree.mkdir(&pod_rel.join(id));
            tree.spawn_busy(&dir)
        })
        .collect();
    let registry = Registry::new();
    let m = CollectorMetrics::register(&registry, false, true).expect("register");
    let layout = Layout::new(&tree.root, CgroupVersion::V2, CgroupDriver::Cgroupfs);
    // One container per window (as when the descriptor limit is tight): three windows.
    let mut c = Collector::new(layout, "node-a", m, &cpi_config(), Path::new("/sys"))
        .with_cpi_events(SW)
        .with_cpi_batch(1);
    let names = [
        ("a", ids[0].as_str()),
        ("b", ids[1].as_str()),
        ("c", ids[2].as_str()),
    ];
    c.sync([&pod(UID, "p", &names, "1")]);
    // Each window stays open until every spinner has had 50 ms on a CPU by the scheduler's
    // account (however little a loaded machine gives them), not for a fixed wall time.
    const ON_CPU: u64 = 50_000_000;
    let mut remaining = Vec::new();
    // Per window: each spinner's on-CPU time while the window's counters were surely
    // enabled (after `start_cpi`, before `finish_cpi`).
    let mut spent: Vec<Vec<u64>> = Vec::new();
    while let Some(w) = c.start_cpi() {
        assert_eq!(w.containers(), 1);
        remaining.push(w.remaining);
        let before: Vec<u64> = spinners.iter().map(|&p| on_cpu_ns(p)).collect();
        let opened = std::time::Instant::now();
        let ran = loop {
            std::thread::sleep(Duration::from_millis(50));
            let ran: Vec<u64> = spinners
                .iter()
                .zip(&before)
                .map(|(&p, b)| on_cpu_ns(p).saturating_sub(*b))
                .collect();
            if ran.iter().all(|&r| r >= ON_CPU) {
                break ran;
            }
            assert!(
                opened.elapsed() < Duration::from_secs(60),
                "the spinners got {ran:?} ns on a CPU in 60 s: the machine is too loaded to measure"
            );
        };
        spent.push(ran);
        c.finish_cpi(w);
        if remaining.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(remaining, [2, 1, 0], "three consecutive windows");
    let text = scrape(&registry, &c);
    for (i, (name, _)) in names.iter().enumerate() {
        let line = series(&text, "koordlet_container_cpi{")
            .into_iter()
            .find(|l| l.contains(&format!("container_name=\"{name}\",cpi_field=\"cycles\"")))
            .unwrap_or_else(|| panic!("no series for {name}\n{text}"));
        let v: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        // The container's task-clock is its spinner's CPU time in the window that counted it
        // (the counters run a little longer than the span measured, hence the margins): at
        // least 2/3 of >= 50 ms, so a container left out or counted as idle fails.
        let ran: Vec<f64> = spent.iter().map(|w| w[i] as f64).collect();
        assert!(
            ran.iter().any(|&r| v >= r * 0.66 && v <= r * 1.5 + 5e7),
            "{name}: task-clock {v} ns; its spinner's ns on a CPU in each window: {ran:?}"
        );
    }
}

/// A process's on-CPU time in ns, from the scheduler (`/proc/PID/schedstat`, first field).
fn on_cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
