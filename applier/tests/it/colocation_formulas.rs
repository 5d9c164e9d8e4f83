//! Table tests for colocation: configuration parsing (defaults, ranges, last good value),
//! batch capacity, the update rules (diff threshold, expiry), degradation, the suppression
//! budget, cpuset choice and quota, CPU lists, and the usage window.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use koord_applier::cpu_list::{format_slice, parse_vec};
use koord_applier::node::colocation::capacity::{
    CapacityInput, Resources, UpdateDecision, advertised, at_least, batch_capacity, committed,
    degraded, lowers, moved, system_usage, update_decision,
};
use koord_applier::node::colocation::config::{
    ColocationConfig, ConfigState, MemoryPolicy, SuppressPolicy, parse_colocation, parse_threshold,
};
use koord_applier::node::colocation::suppress::{
    SuppressInput, be_budget_milli, cpuset_for, quota_for,
};
use koord_applier::node::colocation::usage::{Reading, parse_proc_stat_busy, stat_field};
use koord_applier::node::colocation::window::{Series, rate_milli};

const GI: i64 = 1 << 30;

#[test]
fn colocation_config_fields_and_ranges() {
    let c = parse_colocation(
        r#"{"enable":true,"cpuReclaimThresholdPercent":70,"memoryReclaimThresholdPercent":80,
            "memoryCalculatePolicy":"request","metricAggregateDurationSeconds":60,
            "updateTimeThresholdSeconds":120,"resourceDiffThreshold":0.2,"degradeTimeMinutes":5,
            "cpuCalculatePolicy":"usage","nodeConfigs":[]}"#,
    )
    .expect("valid");
    assert!(c.enable);
    assert_eq!(
        (
            c.cpu_reclaim_threshold_percent,
            c.memory_reclaim_threshold_percent
        ),
        (70, 80)
    );
    assert_eq!(c.memory_calculate_policy, MemoryPolicy::Request);
    assert_eq!(c.metric_aggregate_duration, Duration::from_secs(60));
    assert_eq!(c.update_time_threshold, Duration::from_secs(120));
    assert_eq!(c.resource_diff_threshold, 0.2);
    assert_eq!(c.degrade_time, Duration::from_secs(300));

    // (json, substring the error must contain)
    let bad = [
        (
            r#"{"cpuReclaimThresholdPercent":101}"#,
            "cpuReclaimThresholdPercent = 101 is out of range 0..100",
        ),
        (
            r#"{"memoryReclaimThresholdPercent":-1}"#,
            "memoryReclaimThresholdPercent = -1 is out of range 0..100",
        ),
        (
            r#"{"metricAggregateDurationSeconds":0}"#,
            "metricAggregateDurationSeconds = 0 is out of range",
        ),
        (
            r#"{"updateTimeThresholdSeconds":-5}"#,
            "updateTimeThresholdSeconds = -5 is out of range",
        ),
        (
            r#"{"degradeTimeMinutes":0}"#,
            "degradeTimeMinutes = 0 is out of range",
        ),
        (
            r#"{"resourceDiffThreshold":1.5}"#,
            "resourceDiffThreshold = 1.5 is out of range 0..1",
        ),
        (
            r#"{"resourceDiffThreshold":-0.1}"#,
            "resourceDiffThreshold = -0.1 is out of range 0..1",
        ),
        (
            r#"{"memoryCalculatePolicy":"maxUsage"}"#,
            "memoryCalculatePolicy = \"maxUsage\" is not one of usage, request",
        ),
        (r#"{"enable":"yes"}"#, "colocation-config: invalid JSON"),
        (r#"{"enable":true"#, "colocation-config: invalid JSON"),
        (r#"[]"#, "colocation-config: invalid JSON"),
    ];
    for (json, want) in bad {
        let err = parse_colocation(json).expect_err(json).to_string();
        assert!(err.contains(want), "{json}: {err:?} lacks {want:?}");
    }
    // Edges are inside the ranges.
    let c = parse_colocation(
        r#"{"cpuReclaimThresholdPercent":0,"memoryReclaimThresholdPercent":100,"resourceDiffThreshold":0,"degradeTimeMinutes":1}"#,
    )
    .expect("edges");
    assert_eq!(
        (
            c.cpu_reclaim_threshold_percent,
            c.memory_reclaim_threshold_percent
        ),
        (0, 100)
    );
}

#[test]
fn threshold_config_fields_and_ranges() {
    let cases = [
        ("{}", false, 65, SuppressPolicy::Cpuset),
        (
            r#"{"clusterStrategy":{"enable":true}}"#,
            true,
            65,
            SuppressPolicy::Cpuset,
        ),
        (
            r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":40,"cpuSuppressPolicy":"cfsQuota","memoryEvictThresholdPercent":70}}"#,
            true,
            40,
            SuppressPolicy::CfsQuota,
        ),
        (
            r#"{"clusterStrategy":{"cpuSuppressPolicy":"CPUSET"}}"#,
            false,
            65,
            SuppressPolicy::Cpuset,
        ),
    ];
    for (json, enable, pct, policy) in cases {
        let t = parse_threshold(json).expect(json);
        assert_eq!(
            (
                t.enable,
                t.cpu_suppress_threshold_percent,
                t.cpu_suppress_policy
            ),
            (enable, pct, policy),
            "{json}"
        );
    }
    for (json, want) in [
        (
            r#"{"clusterStrategy":{"cpuSuppressThresholdPercent":120}}"#,
            "clusterStrategy.cpuSuppressThresholdPercent = 120 is out of range 0..100",
        ),
        (
            r#"{"clusterStrategy":{"cpuSuppressPolicy":"quota"}}"#,
            "clusterStrategy.cpuSuppressPolicy = \"quota\" is not one of cpuset, cfsQuota",
        ),
        (
            r#"{"clusterStrategy":"#,
            "resource-threshold-config: invalid JSON",
        ),
    ] {
        let err = parse_threshold(json).expect_err(json).to_string();
        assert!(err.contains(want), "{json}: {err:?} lacks {want:?}");
    }
}

#[test]
fn broken_key_keeps_last_good_value_and_other_key_updates() {
    let mut st = ConfigState::default();
    let mut data = BTreeMap::new();
    data.insert(
        "colocation-config".to_owned(),
        r#"{"enable":true,"cpuReclaimThresholdPercent":50}"#.to_owned(),
    );
    assert!(st.update(Some(&data)).is_empty());
    assert!(st.current.colocation.enable);
    assert_eq!(st.current.colocation.cpu_reclaim_threshold_percent, 50);

    data.insert("colocation-config".to_owned(), "{broken".to_owned());
    data.insert(
        "resource-threshold-config".to_owned(),
        r#"{"clusterStrategy":{"enable":true}}"#.to_owned(),
    );
    let errs = st.update(Some(&data));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0]
            .to_string()
            .starts_with("colocation-config: invalid JSON")
    );
    assert_eq!(
        st.current.colocation.cpu_reclaim_threshold_percent, 50,
        "last good value kept"
    );
    assert!(st.current.threshold.enable, "the other key still updated");

    // The key removed -> defaults; the ConfigMap deleted -> defaults.
    data.remove("colocation-config");
    assert!(st.update(Some(&data)).is_empty());
    assert_eq!(st.current.colocation, ColocationConfig::default());
    assert!(st.update(None).is_empty());
    assert!(!st.current.threshold.enable);
}

fn cfg(cpu_pct: i64, mem_pct: i64, policy: MemoryPolicy) -> ColocationConfig {
    ColocationConfig {
        enable: true,
        cpu_reclaim_threshold_percent: cpu_pct,
        memory_reclaim_threshold_percent: mem_pct,
        memory_calculate_policy: policy,
        ..ColocationConfig::default()
    }
}

#[test]
fn batch_capacity_table() {
    struct Case {
        name: &'static str,
        cfg: ColocationConfig,
        input: CapacityInput,
        want: Resources,
    }
    let r = Resources::new;
    let cases = [
        Case {
            // The reference's example shape: 100 cores / 100 Gi, LS use 20 cores / 30 Gi, system
            // 2 cores / 5 Gi: cpu 100*60% - 20 - 2 = 38 cores, mem 100Gi*65% - 30 - 5 = 30 Gi.
            name: "usage policy",
            cfg: cfg(60, 65, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(100_000, 100 * GI),
                node_usage: r(30_000, 45 * GI),
                pods_usage: r(28_000, 40 * GI),
                non_be_usage: r(20_000, 30 * GI),
                non_be_request: r(40_000, 50 * GI),
            },
            want: r(38_000, 30 * GI),
        },
        Case {
            name: "request policy counts LS memory requests, cpu still usage",
            cfg: cfg(60, 65, MemoryPolicy::Request),
            input: CapacityInput {
                allocatable: r(100_000, 100 * GI),
                node_usage: r(30_000, 45 * GI),
                pods_usage: r(28_000, 40 * GI),
                non_be_usage: r(20_000, 30 * GI),
                non_be_request: r(40_000, 50 * GI),
            },
            want: r(38_000, 10 * GI),
        },
        Case {
            name: "floored at 0 when LS use more than the threshold",
            cfg: cfg(60, 65, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(4_000, 8 * GI),
                node_usage: r(3_900, 7 * GI),
                pods_usage: r(3_500, 6 * GI),
                non_be_usage: r(3_500, 6 * GI),
                non_be_request: r(4_000, 8 * GI),
            },
            want: r(0, 0),
        },
        Case {
            name: "pods above node usage (sampling skew): system usage is 0, not negative",
            cfg: cfg(100, 100, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(8_000, 16 * GI),
                node_usage: r(1_000, 2 * GI),
                pods_usage: r(1_500, 3 * GI),
                non_be_usage: r(1_000, 2 * GI),
                non_be_request: r(2_000, 4 * GI),
            },
            want: r(7_000, 14 * GI),
        },
        Case {
            name: "BE usage does not reduce batch capacity (only via system = node - pods)",
            cfg: cfg(50, 50, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(10_000, 10 * GI),
                node_usage: r(9_000, 9 * GI),
                pods_usage: r(8_000, 8 * GI),
                non_be_usage: r(1_000, GI),
                non_be_request: r(1_000, GI),
            },
            // 5000 - 1000 - (9000-8000) = 3000; 5Gi - 1Gi - 1Gi = 3Gi
            want: r(3_000, 3 * GI),
        },
        Case {
            name: "threshold 0 lends nothing",
            cfg: cfg(0, 0, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(10_000, 10 * GI),
                ..CapacityInput::default()
            },
            want: r(0, 0),
        },
        Case {
            name: "huge numbers do not overflow",
            cfg: cfg(100, 100, MemoryPolicy::Usage),
            input: CapacityInput {
                allocatable: r(i64::MAX, i64::MAX),
                ..CapacityInput::default()
            },
            want: r(i64::MAX, i64::MAX),
        },
    ];
    for c in cases {
        assert_eq!(batch_capacity(&c.cfg, &c.input), c.want, "{}", c.name);
    }
    let i = CapacityInput {
        node_usage: r(5, 10),
        pods_usage: r(7, 4),
        ..CapacityInput::default()
    };
    assert_eq!(system_usage(&i), r(0, 6));
}

#[test]
fn diff_threshold_table() {
    // (old, new, threshold, moved)
    let cases = [
        (1000, 1100, 0.1, false), // exactly 10%: not more than
        (1000, 1101, 0.1, true),
        (1000, 900, 0.1, false),
        (1000, 899, 0.1, true),
        (0, 0, 0.1, false),
        (0, 1, 0.1, true),
        (1000, 0, 0.1, true),
        (1000, 1001, 0.0, true), // threshold 0: any change
        (1000, 1999, 1.0, false),
        (1000, 2001, 1.0, true),
    ];
    for (old, new, t, want) in cases {
        assert_eq!(moved(old, new, t), want, "{old} -> {new} @ {t}");
    }
}

#[test]
fn update_decision_table() {
    let c = ColocationConfig::default(); // diff 0.1, update 300 s
    let r = Resources::new;
    let s = |secs| Some(Duration::from_secs(secs));
    let cases = [
        (
            "missing on node",
            None,
            r(1000, GI),
            s(1),
            UpdateDecision::Missing,
        ),
        (
            "equal values never patched",
            Some(r(1000, GI)),
            r(1000, GI),
            None,
            UpdateDecision::Skip,
        ),
        (
            "equal values, long ago",
            Some(r(1000, GI)),
            r(1000, GI),
            s(10_000),
            UpdateDecision::Skip,
        ),
        (
            "cpu moved 20%",
            Some(r(1000, GI)),
            r(1200, GI),
            s(1),
            UpdateDecision::Moved,
        ),
        (
            "memory moved 50%",
            Some(r(1000, GI)),
            r(1000, GI / 2),
            s(1),
            UpdateDecision::Moved,
        ),
        (
            "small move, recent patch",
            Some(r(1000, GI)),
            r(1050, GI),
            s(299),
            UpdateDecision::Skip,
        ),
        (
            "small move, update time passed",
            Some(r(1000, GI)),
            r(1050, GI),
            s(300),
            UpdateDecision::Expired,
        ),
        (
            "small move, never patched since start",
            Some(r(1000, GI)),
            r(1050, GI),
            None,
            UpdateDecision::Expired,
        ),
        (
            "to zero",
            Some(r(1000, GI)),
            r(0, 0),
            s(1),
            UpdateDecision::Moved,
        ),
    ];
    for (name, on_node, new, since, want) in cases {
        let got = update_decision(&c, on_node, new, since);
        assert_eq!(got, want, "{name}");
        assert_eq!(got.patch(), want != UpdateDecision::Skip);
    }
}

#[test]
fn degradation_table() {
    let mut c = ColocationConfig {
        enable: true,
        ..ColocationConfig::default()
    };
    c.degrade_time = Duration::from_secs(15 * 60);
    let input = CapacityInput {
        allocatable: Resources::new(10_000, 10 * GI),
        ..CapacityInput::default()
    };
    let full = Resources::new(6_000, 65 * GI / 10);
    // (age, degraded, advertised)
    let cases = [
        (Some(Duration::from_secs(0)), false, full),
        (Some(Duration::from_secs(900)), false, full),
        (Some(Duration::from_secs(901)), true, Resources::ZERO),
        (None, true, Resources::ZERO),
    ];
    for (age, want_degraded, want) in cases {
        assert_eq!(degraded(&c, age), want_degraded, "{age:?}");
        assert_eq!(
            advertised(&c, Some(&input), age, Resources::ZERO),
            want,
            "{age:?}"
        );
    }
    // No input (too few readings) or colocation disabled: 0.
    assert_eq!(
        advertised(&c, None, Some(Duration::ZERO), Resources::ZERO),
        Resources::ZERO
    );
    c.enable = false;
    assert_eq!(
        advertised(&c, Some(&input), Some(Duration::ZERO), Resources::ZERO),
        Resources::ZERO
    );
}

#[test]
fn never_less_than_the_batch_requests_already_bound() {
    let c = ColocationConfig {
        enable: true,
        ..ColocationConfig::default()
    };
    // 10 cores / 10 GiB at the defaults (cpu 60%, memory 65%) lend 6 cores / 6.5 GiB; LS usage
    // takes it down.
    let with_ls = |cpu_milli: i64, memory_bytes: i64| CapacityInput {
        allocatable: Resources::new(10_000, 10 * GI),
        node_usage: Resources::new(cpu_milli, memory_bytes),
        pods_usage: Resources::new(cpu_milli, memory_bytes),
        non_be_usage: Resources::new(cpu_milli, memory_bytes),
        ..CapacityInput::default()
    };
    let bound = [Resources::new(1_000, GI), Resources::new(500, GI / 2)];
    let floor = committed(&bound);
    assert_eq!(floor, Resources::new(1_500, 3 * GI / 2));
    let fresh = Some(Duration::ZERO);
    let stale = Some(Duration::from_secs(3600));
    // (what, input, age, enabled, advertised)
    let cases = [
        (
            "room above the floor: the formula",
            Some(with_ls(1_000, GI)),
            fresh,
            true,
            Resources::new(5_000, 55 * GI / 10),
        ),
        (
            "LS usage swung up: the formula (0) below the floor",
            Some(with_ls(9_000, 9 * GI)),
            fresh,
            true,
            floor,
        ),
        (
            "one dimension below, the other above",
            Some(with_ls(6_000, GI)),
            fresh,
            true,
            Resources::new(1_500, 55 * GI / 10),
        ),
        // Withdrawn as the reference withdraws: stale usage, or the operator's enable: false.
        (
            "degraded (stale usage)",
            Some(with_ls(1_000, GI)),
            stale,
            true,
            Resources::ZERO,
        ),
        ("no input yet", None, fresh, true, Resources::ZERO),
        (
            "colocation disabled",
            Some(with_ls(1_000, GI)),
            fresh,
            false,
            Resources::ZERO,
        ),
    ];
    for (what, input, age, enable, want) in cases {
        let cfg = ColocationConfig {
            enable,
            ..c.clone()
        };
        assert_eq!(advertised(&cfg, input.as_ref(), age, floor), want, "{what}");
    }
    assert_eq!(committed(&[]), Resources::ZERO);
}

#[test]
fn a_lowering_patch_is_held_at_the_pods_bound_since_the_cache_was_read() {
    let on_node = Resources::new(400, GI);
    // (what, on the Node, new, lowers)
    let cases = [
        (
            "nothing on the Node yet",
            None,
            Resources::new(100, GI),
            false,
        ),
        ("same", Some(on_node), on_node, false),
        ("both up", Some(on_node), Resources::new(500, 2 * GI), false),
        ("cpu down", Some(on_node), Resources::new(100, 2 * GI), true),
        (
            "memory down",
            Some(on_node),
            Resources::new(500, GI / 2),
            true,
        ),
    ];
    for (what, old, new, want) in cases {
        assert_eq!(lowers(old, new), want, "{what}");
    }
    // The cache had one BE pod (100m); the scheduler bound a second (50m) on the old 400m.
    let new = Resources::new(120, GI / 2);
    let bound_now = committed(&[Resources::new(100, GI / 4), Resources::new(50, GI / 8)]);
    assert_eq!(at_least(new, bound_now), Resources::new(150, GI / 2));
    assert_eq!(at_least(new, Resources::ZERO), new);
}

#[test]
fn suppress_budget_table() {
    let base = SuppressInput {
        node_cpus_milli: 8_000,
        node_used_milli: 0,
        pods_used_milli: 0,
        ls_used_milli: 0,
        threshold_percent: 65,
        min_milli: 2_000,
    };
    // (name, input, budget)
    let cases = [
        ("idle node: BE gets node x threshold", base, 5_200),
        (
            "LS 2 cores, system 0.5: 5.2 - 2 - 0.5",
            SuppressInput {
                node_used_milli: 4_500,
                pods_used_milli: 4_000,
                ls_used_milli: 2_000,
                ..base
            },
            2_700,
        ),
        (
            "LS busy: floored at 2 CPUs",
            SuppressInput {
                node_used_milli: 8_000,
                pods_used_milli: 7_500,
                ls_used_milli: 5_000,
                ..base
            },
            2_000,
        ),
        (
            "floor above the node: the whole node",
            SuppressInput {
                node_cpus_milli: 1_000,
                node_used_milli: 1_000,
                pods_used_milli: 1_000,
                ls_used_milli: 1_000,
                ..base
            },
            1_000,
        ),
        (
            "floor 0.2 on 2 CPUs (this machine's experiment)",
            SuppressInput {
                node_cpus_milli: 2_000,
                node_used_milli: 2_000,
                pods_used_milli: 1_950,
                ls_used_milli: 1_000,
                threshold_percent: 65,
                min_milli: 200,
            },
            250,
        ),
        (
            "threshold 100 on an idle node: all CPUs",
            SuppressInput {
                threshold_percent: 100,
                ..base
            },
            8_000,
        ),
        (
            "pods above node (skew): system 0",
            SuppressInput {
                node_used_milli: 1_000,
                pods_used_milli: 3_000,
                ls_used_milli: 1_000,
                ..base
            },
            4_200,
        ),
    ];
    for (name, input, want) in cases {
        assert_eq!(be_budget_milli(&input), want, "{name}");
    }
}

#[test]
fn cpuset_choice_table() {
    let all: Vec<u32> = (0..8).collect();
    let none = BTreeSet::new();
    let bound: BTreeSet<u32> = [6, 7].into_iter().collect();
    // (budget, floor, ls-bound, cpus)
    let cases: [(i64, i64, &BTreeSet<u32>, Vec<u32>); 7] = [
        (2_000, 2_000, &none, vec![6, 7]),
        (2_100, 2_000, &none, vec![5, 6, 7]),  // rounded up
        (500, 2_000, &none, vec![6, 7]),       // floor
        (0, 0, &none, vec![7]),                // at least one CPU
        (3_000, 2_000, &bound, vec![3, 4, 5]), // never LS-bound CPUs
        (7_000, 2_000, &bound, vec![0, 1, 2, 3, 4, 5]), // ... even when the budget is larger
        (99_000, 2_000, &none, (0..8).collect()),
    ];
    for (budget, floor, b, want) in cases {
        assert_eq!(
            cpuset_for(budget, floor, &all, b),
            want,
            "{budget} {floor} {b:?}"
        );
    }
    assert!(cpuset_for(1000, 0, &[], &none).is_empty());
    // Every CPU bound to LS pods: BE still gets the last one rather than nothing.
    let all_bound: BTreeSet<u32> = (0..8).collect();
    assert_eq!(cpuset_for(2_000, 2_000, &all, &all_bound), vec![6, 7]);
}

#[test]
fn quota_and_cpu_lists() {
    assert_eq!(quota_for(250, 100_000), 25_000);
    assert_eq!(quota_for(2_000, 100_000), 200_000);
    assert_eq!(quota_for(1_500, 50_000), 75_000);
    assert_eq!(quota_for(0, 100_000), 1_000, "kernel minimum");
    for (text, cpus) in [
        ("0-3,8,10-11", vec![0, 1, 2, 3, 8, 10, 11]),
        ("1", vec![1]),
        ("", vec![]),
        ("0-1\n", vec![0, 1]),
    ] {
        assert_eq!(parse_vec(text), Some(cpus.clone()), "{text:?}");
        if !text.contains('\n') {
            assert_eq!(format_slice(&cpus), text);
        }
    }
    for bad in ["a", "3-1", "1-", "0-99999999"] {
        assert_eq!(parse_vec(bad), None, "{bad:?}");
    }
}

#[test]
fn proc_and_stat_parsing() {
    let tail = "intr 0\nctxt 9\nbtime 1\nprocesses 5\n";
    let stat = format!("cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 0 25 500 10 1 1 0 0 0\n{tail}");
    assert_eq!(parse_proc_stat_busy(&stat), Some(100 + 5 + 50 + 3 + 2 + 1));
    assert_eq!(parse_proc_stat_busy(&format!("cpu 1 2 3\n{tail}")), None);
    assert_eq!(
        parse_proc_stat_busy("cpu  100 5 50 1000 20 3 2 1 0 0\n"),
        None,
        "not a whole /proc/stat"
    );
    let real = std::fs::read_to_string("/proc/stat").expect("this machine's /proc/stat");
    assert!(
        parse_proc_stat_busy(&real).is_some(),
        "the kernel's own /proc/stat parses"
    );
    let ms = "cache 100\ntotal_inactive_file 4096\ninactive_file 10\n";
    assert_eq!(stat_field(ms, "total_inactive_file"), Some(4096));
    assert_eq!(stat_field(ms, "inactive_file"), Some(10));
    assert_eq!(
        stat_field("MemTotal:       16318692 kB\n", "MemTotal"),
        Some(16_318_692)
    );
    assert_eq!(stat_field(ms, "missing"), None);
}

#[test]
fn window_rates_and_averages() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let rd = |cpu_s: u64, mem: u64| Reading {
        cpu_ns: cpu_s * 1_000_000_000,
        memory_bytes: mem,
    };
    let w = Duration::from_secs(10);
    let mut s = Series::default();
    assert_eq!(s.cpu_avg_milli(), None);
    s.push(at(0), rd(0, 100), w);
    assert_eq!(s.cpu_avg_milli(), None, "one reading has no rate");
    s.push(at(2), rd(1, 200), w); // 0.5 CPU
    s.push(at(4), rd(5, 300), w); // 2 CPUs
    assert_eq!(s.cpu_avg_milli(), Some(1250));
    assert_eq!(s.cpu_recent_milli(), Some(2000));
    assert_eq!(s.memory_avg(), Some(200));
    // Old readings leave the window; the newest one at or before the cutoff stays as the start
    // of the CPU delta.
    s.push(at(20), rd(15, 400), w);
    s.push(at(22), rd(17, 500), w);
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(s.cpu_avg_milli(), Some(666), "(17-5) s over 18 s");
    s.push(at(30), rd(25, 500), w);
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(s.cpu_avg_milli(), Some(1000), "(25-15) s over 10 s");
    assert_eq!(s.memory_avg(), Some(466));
    // A reading not newer than the last is ignored; a counter that went back restarts.
    s.push(at(30), rd(99, 0), w);
    assert_eq!(s.len(), 3);
    s.push(at(32), rd(1, 0), w);
    assert_eq!(s.len(), 1);
    assert_eq!(s.last_at(), Some(at(32)));
    assert_eq!(rate_milli(1_000_000_000, Duration::from_secs(4)), Some(250));
    assert_eq!(rate_milli(1, Duration::ZERO), None);
}
