//! Resctrl on a temporary tree shaped like `/sys/fs/resctrl` with two cache domains: every file
//! written, idempotence, and tasks of deleted pods moved back to the default group.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use koord_api::{DecisionSource, QosClass, ResolvedResctrlQos};
use koord_applier::node::resctrl::{PodResctrl, ResctrlReport, detect, reconcile};

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = dir.path();
    fs::create_dir_all(r.join("info/L3")).expect("info");
    fs::create_dir_all(r.join("info/MB")).expect("info");
    fs::write(r.join("info/L3/cbm_mask"), "7ff\n").expect("mask");
    fs::write(r.join("info/L3/min_cbm_bits"), "1\n").expect("min");
    fs::write(r.join("info/MB/bandwidth_gran"), "10\n").expect("gran");
    fs::write(r.join("info/MB/min_bandwidth"), "10\n").expect("min bw");
    fs::write(
        r.join("schemata"),
        "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n",
    )
    .expect("schemata");
    fs::write(r.join("tasks"), "").expect("tasks");
    dir
}

/// What the kernel does and a plain file cannot: a pid lives in exactly one group, and a new
/// group comes with empty `tasks` and `schemata` files.
fn settle_like_the_kernel(root: &Path) {
    let read = |p: &Path| -> BTreeSet<String> {
        fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let in_root = read(&root.join("tasks"));
    for g in ["koord-LS", "koord-BE"] {
        let tasks = root.join(g).join("tasks");
        if root.join(g).exists() {
            let kept: Vec<String> = read(&tasks).difference(&in_root).cloned().collect();
            fs::write(
                &tasks,
                kept.iter().map(|p| format!("{p}\n")).collect::<String>(),
            )
            .expect("tasks");
        }
    }
}

fn qos(start: i64, end: i64, mba: i64) -> ResolvedResctrlQos {
    ResolvedResctrlQos {
        enabled: true,
        cat_range_start_percent: start,
        cat_range_end_percent: end,
        mba_percent: mba,
        source: DecisionSource::ClusterConfig,
    }
}

#[test]
fn groups_schemata_tasks_idempotence_and_cleanup() {
    let dir = tree();
    let root = dir.path();
    let support = detect(root).expect("supported");
    assert_eq!(support.l3, Some((0x7ff, 1)));
    let pods = vec![
        PodResctrl {
            class: QosClass::Ls,
            qos: qos(0, 100, 100),
            pids: vec![100, 101],
        },
        PodResctrl {
            class: QosClass::Lsr,
            qos: qos(0, 100, 100),
            pids: vec![102],
        },
        PodResctrl {
            class: QosClass::Be,
            qos: qos(0, 30, 35),
            pids: vec![200],
        },
        PodResctrl {
            class: QosClass::System,
            qos: qos(0, 100, 100),
            pids: vec![300],
        },
    ];
    let r = reconcile(root, &support, &pods).expect("pass 1");
    assert_eq!(
        r,
        ResctrlReport {
            groups_created: 2,
            schemata_written: 2,
            tasks_added: 4,
            tasks_removed: 0,
            tasks_gone: 0
        }
    );
    assert_eq!(
        fs::read_to_string(root.join("koord-LS/schemata")).expect("ls"),
        "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"
    );
    // 11 ways at 0..30% -> the lowest 3 ways; 35% MBA rounded up to the 10% granularity.
    assert_eq!(
        fs::read_to_string(root.join("koord-BE/schemata")).expect("be"),
        "L3:0=7;1=7\nMB:0=40;1=40\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("koord-LS/tasks")).expect("tasks"),
        "100\n101\n102\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("koord-BE/tasks")).expect("tasks"),
        "200\n"
    );
    settle_like_the_kernel(root);

    let r = reconcile(root, &support, &pods).expect("pass 2");
    assert_eq!(r, ResctrlReport::default(), "a second pass writes nothing");

    // The BE pod is deleted and one LS process exits: their tasks leave the class groups.
    let remaining = vec![PodResctrl {
        class: QosClass::Ls,
        qos: qos(0, 100, 100),
        pids: vec![100, 102],
    }];
    let r = reconcile(root, &support, &remaining).expect("pass 3");
    assert_eq!(
        (r.tasks_removed, r.tasks_added, r.schemata_written),
        (2, 0, 0)
    );
    assert_eq!(
        fs::read_to_string(root.join("tasks")).expect("root tasks"),
        "101\n200\n"
    );
    settle_like_the_kernel(root);
    assert_eq!(
        reconcile(root, &support, &remaining).expect("pass 4"),
        ResctrlReport::default()
    );
}

#[test]
fn unsupported_hardware_is_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = detect(dir.path()).expect_err("not mounted").to_string();
    assert!(err.contains("not mounted"), "{err}");
    fs::write(dir.path().join("schemata"), "L2:0=ff\n").expect("schemata");
    let err = detect(dir.path()).expect_err("no CAT/MBA").to_string();
    assert!(err.contains("neither L3 CAT nor MBA"), "{err}");
    // The real machine: report what it has, never fail the test for missing hardware.
    match detect(Path::new("/sys/fs/resctrl")) {
        Ok(s) => println!("this machine has resctrl: {s:?}"),
        Err(e) => println!("this machine: {e}"),
    }
}
