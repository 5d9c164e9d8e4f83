//! The flags to [`Config`]: defaults, forms, and every range check by its message.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;
use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::systemd::{Settings as SystemdSettings, SystemdDbus};
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

use super::*;
use crate::node::ancestors::KubeletMemoryQos;
use crate::node::collectors::GateError;
use crate::node::nri::NriMode;
use crate::server::EndpointSettings;

/// `koord-applier ARGS...` parsed and built; a clap refusal or a range check as its text.
fn config(args: &[&str]) -> Result<(Config, Command), String> {
    let cli = Cli::try_parse_from(std::iter::once("koord-applier").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    Config::from_cli(&cli).map_err(|e| e.to_string())
}

/// `once -f p ARGS...`.
fn once(args: &[&str]) -> Result<(Config, Command), String> {
    config(&[&["once", "-f", "p"], args].concat())
}

/// `run --node-name n ARGS...`, its `run` section.
fn run(args: &[&str]) -> Result<RunConfig, String> {
    match config(&[&["run", "--node-name", "n"], args].concat())?.1 {
        Command::Run(run) => Ok(*run),
        Command::Once(_) => panic!("run"),
    }
}

#[test]
fn parses_flags_and_defaults() {
    let (cfg, command) = config(&[
        "run",
        "--node-name",
        "n1",
        "--cgroup-version",
        "v1",
        "--cgroup-driver",
        "systemd",
    ])
    .expect("valid");
    assert_eq!(cfg.cgroup.root, PathBuf::from("/sys/fs/cgroup"));
    assert_eq!(
        (cfg.cgroup.version, cfg.cgroup.driver),
        (Some(CgroupVersion::V1), Some(CgroupDriver::Systemd))
    );
    assert!(
        !cfg.cpu_idle_fallback,
        "the cpu.idle fallback is off by default"
    );
    assert_eq!(cfg.resctrl_root, PathBuf::from("/sys/fs/resctrl"));
    let Command::Run(rc) = &command else {
        panic!("run")
    };
    assert_eq!(rc.node_name, "n1");
    assert_eq!(rc.metrics_addr, "0.0.0.0:9316".parse().expect("addr"));
    assert_eq!(rc.resync, Duration::from_secs(60));
    assert_eq!(rc.ancestors_check, Some(Duration::from_millis(250)));
    assert_eq!(rc.event_window, Duration::from_secs(600));
    assert_eq!(rc.endpoint, EndpointSettings::default());
    assert_eq!(rc.endpoint.lifetime(), Duration::from_secs(15));
    // On by default in `run`, unlike their `Default` (off: a `RunConfig` built in code).
    assert!(rc.nri.mode == NriMode::Auto && rc.reclaim.any() && rc.reclaim.throttle);
    assert!(rc.proactive.enabled && rc.colocation.enabled);
    assert!(
        !crate::node::colocation::Settings::default().enabled,
        "a RunConfig built in code runs no colocation"
    );
    assert_eq!(
        run(&["--ancestors-check-ms", "0", "--proc-root", "/host/proc"])
            .map(|r| (r.ancestors_check, r.reclaim.proc_root)),
        Ok((None, PathBuf::from("/host/proc")))
    );

    let (cfg, command) = once(&["--dry-run"]).expect("valid");
    assert!(cfg.dry_run);
    assert_eq!(
        command,
        Command::Once(OnceConfig {
            file: "p".into(),
            collect: false,
            collect_serve: None,
            timings: false,
        })
    );
    assert!(once(&["--cgroup-version", "v3"]).is_err());
}

#[test]
fn once_collect_and_serve() {
    let (_, command) = once(&["--collect", "--collect-serve", ":9999"]).expect("valid");
    let Command::Once(o) = &command else {
        panic!("once")
    };
    assert!(o.collect);
    assert_eq!(o.collect_serve, Some("0.0.0.0:9999".parse().expect("addr")));
    assert_eq!(
        once(&["--collect", "--collect-serve", "nonsense"]).map(|_| ()),
        Err("--collect-serve: nonsense".to_owned())
    );
    assert!(
        once(&["--collect-serve", ":1"]).is_err(),
        "requires --collect"
    );
    assert!(once(&["--collect", "--timings"]).is_err(), "conflicts");
}

#[test]
fn collector_gates_and_intervals() {
    let c = run(&[]).map(|_| ());
    assert_eq!(c, Ok(()));
    let collectors = |args: &[&str]| {
        config(&[&["run", "--node-name", "n"], args].concat()).map(|(c, _)| c.collectors)
    };
    assert_eq!(collectors(&[]), Ok(CollectorConfig::disabled()));
    let c = collectors(&["--feature-gates=PSICollector=true"]).expect("valid");
    assert!(c.psi && !c.cpi);
    // `once --collect`: unnamed gates default on.
    let c = once(&["--collect", "--feature-gates=CPICollector=false"])
        .expect("valid")
        .0
        .collectors;
    assert!(c.psi && !c.cpi);
    assert_eq!(
        collectors(&["--cpi-collector-interval-seconds", "5"]),
        Err(
            "--collect-cpi-timewindow-seconds (10) exceeds --cpi-collector-interval-seconds (5)"
                .to_owned()
        )
    );
    assert_eq!(
        collectors(&["--psi-collector-interval-seconds", "0"]),
        Err("collector intervals and the CPI window must be at least 1 second".to_owned())
    );
    // `once` without --collect collects nothing: its intervals are not read, its gates are.
    assert_eq!(
        once(&[
            "--psi-collector-interval-seconds",
            "0",
            "--feature-gates=Libpfm4=true"
        ])
        .map(|(c, _)| c.collectors),
        Ok(CollectorConfig {
            ignored_gates: vec!["Libpfm4"],
            ..CollectorConfig::disabled()
        })
    );
    let cli = Cli::try_parse_from([
        "koord-applier",
        "once",
        "-f",
        "p",
        "--feature-gates=Nope=true",
    ])
    .expect("parses");
    assert_eq!(
        Config::from_cli(&cli),
        Err(ConfigError::Gates(GateError::Unknown("Nope".into())))
    );
    // The gates are checked before anything else.
    let cli = Cli::try_parse_from([
        "koord-applier",
        "run",
        "--node-name",
        "n",
        "--resync-seconds=0",
        "--feature-gates=CPICollector",
    ])
    .expect("parses");
    assert!(matches!(
        Config::from_cli(&cli),
        Err(ConfigError::Gates(GateError::Syntax(_)))
    ));
}

#[test]
fn ancestor_flags() {
    let parse = |args: &[&str]| config(args).map(|(c, _)| c.ancestors);
    let on = AncestorSettings {
        enabled: true,
        kubelet_memory_qos: KubeletMemoryQos::Off,
    };
    assert_eq!(parse(&["once", "-f", "p"]), Ok(on));
    let off = AncestorSettings {
        enabled: false,
        ..on
    };
    // After the subcommand (as the guest test passes it) and before it (global).
    assert_eq!(
        parse(&["once", "--protect-ancestors=false", "-f", "p"]),
        Ok(off)
    );
    assert_eq!(
        parse(&["--protect-ancestors", "false", "once", "-f", "p"]),
        Ok(off)
    );
    assert_eq!(
        parse(&["once", "--protect-ancestors=true", "-f", "p"]),
        Ok(on)
    );
    assert!(parse(&["once", "--protect-ancestors=maybe", "-f", "p"]).is_err());
    assert_eq!(
        parse(&["run", "--node-name", "n", "--kubelet-memory-qos"]),
        Ok(AncestorSettings {
            kubelet_memory_qos: KubeletMemoryQos::Tiered,
            ..on
        })
    );
    for (arg, want) in [
        ("--kubelet-memory-qos=alpha", KubeletMemoryQos::Alpha),
        ("--kubelet-memory-qos=tiered", KubeletMemoryQos::Tiered),
        ("--kubelet-memory-qos=true", KubeletMemoryQos::Tiered),
        ("--kubelet-memory-qos=false", KubeletMemoryQos::Off),
        ("--kubelet-memory-qos=off", KubeletMemoryQos::Off),
    ] {
        assert_eq!(
            parse(&["once", arg, "-f", "p"]).map(|a| a.kubelet_memory_qos),
            Ok(want),
            "{arg}"
        );
    }
    assert!(parse(&["once", "--kubelet-memory-qos=maybe", "-f", "p"]).is_err());
}

#[test]
fn kubelet_cgroup_root_flag() {
    let parse = |args: &[&str]| once(args).map(|(c, _)| c.cgroup.kubelet_root);
    assert_eq!(parse(&[]), Ok(None), "detected by default");
    assert_eq!(
        parse(&["--kubelet-cgroup-root", "/kubelet"]),
        Ok(Some(KubeletRoot::parse("/kubelet").expect("root")))
    );
    assert_eq!(
        parse(&["--kubelet-cgroup-root=/"]),
        Ok(Some(KubeletRoot::top()))
    );
    for bad in ["kubelet", "/kubelet/../..", "/a//b", "/a/b/c/d/e"] {
        let e = parse(&["--kubelet-cgroup-root", bad]).expect_err(bad);
        assert!(
            e.contains("--kubelet-cgroup-root") && e.contains("`/name[/name...]`"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn locality_flag() {
    let pages = |args: &[&str]| config(args).map(|(c, _)| c.locality.max_pages_per_second);
    assert_eq!(pages(&["once", "-f", "p"]), Ok(None), "off by default");
    assert_eq!(
        pages(&["once", "-f", "p", "--locality-max-pages-per-second", "5000"]),
        Ok(Some(5000))
    );
    assert_eq!(
        pages(&["--locality-max-pages-per-second", "0", "once", "-f", "p"]),
        Ok(None),
        "0 = off"
    );
    assert!(pages(&["once", "-f", "p", "--locality-max-pages-per-second", "-1"]).is_err());
}

/// `CgroupConfig::layout` on trees: detection, the flag, a forced driver, and two candidates.
#[test]
fn layout_finds_the_kubelet_root() {
    let layout = |dirs: &[&str], root: Option<&str>, driver: Option<CgroupDriver>| {
        let tmp = tempfile::tempdir().expect("tmp");
        for d in dirs {
            std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
        }
        let cgroup = CgroupConfig {
            root: tmp.path().to_owned(),
            version: Some(CgroupVersion::V2),
            driver,
            kubelet_root: root.map(|r| KubeletRoot::parse(r).expect("root")),
        };
        cgroup
            .layout()
            .map(|l| (l.driver, l.kubelet_root.to_string(), l.kubepods_dir()))
            .map_err(|e| e.to_string())
    };
    use CgroupDriver::{Cgroupfs, Systemd};
    let ok = |d, r: &str, k: &str| Ok((d, r.to_owned(), PathBuf::from(k)));
    assert_eq!(layout(&[], None, None), ok(Cgroupfs, "/", "kubepods"));
    assert_eq!(
        layout(&[], None, Some(Systemd)),
        ok(Systemd, "/", "kubepods.slice")
    );
    assert_eq!(
        layout(&["kubelet/kubepods/burstable"], None, None),
        ok(Cgroupfs, "/kubelet", "kubelet/kubepods")
    );
    assert_eq!(
        layout(&["kubelet.slice/kubelet-kubepods.slice"], None, None),
        ok(Systemd, "/kubelet", "kubelet.slice/kubelet-kubepods.slice")
    );
    // The flag wins over a decoy at the top; the driver comes from what is below it.
    assert_eq!(
        layout(
            &["kubepods", "kubelet.slice/kubelet-kubepods.slice"],
            Some("/kubelet"),
            None
        ),
        ok(Systemd, "/kubelet", "kubelet.slice/kubelet-kubepods.slice")
    );
    assert_eq!(
        layout(&[], Some("/kubelet"), None),
        ok(Cgroupfs, "/kubelet", "kubelet/kubepods")
    );
    let e = layout(&["kubelet/kubepods", "other/kubepods"], None, None).expect_err("ambiguous");
    assert!(
        e.contains("other/kubepods (cgroupRoot /other, cgroupfs)")
            && e.contains("--kubelet-cgroup-root"),
        "{e}"
    );
    // The flag settles it.
    assert_eq!(
        layout(
            &["kubelet/kubepods", "other/kubepods"],
            Some("/other"),
            None
        ),
        ok(Cgroupfs, "/other", "other/kubepods")
    );
}

#[test]
fn addr_forms() {
    assert_eq!(
        parse_addr("127.0.0.1:1"),
        Some("127.0.0.1:1".parse().expect("addr"))
    );
    assert_eq!(parse_addr(":1"), Some("0.0.0.0:1".parse().expect("addr")));
    assert_eq!(parse_addr("nonsense"), None);
    assert_eq!(
        run(&["--metrics-addr", "nonsense"]).map(|_| ()),
        Err("--metrics-addr \"nonsense\" is not host:port or :port".to_owned())
    );
    assert_eq!(
        run(&["--resync-seconds", "0"]).map(|_| ()),
        Err("--resync-seconds must be at least 1".to_owned())
    );
}

#[test]
fn systemd_flags() {
    let parse = |args: &[&str]| once(args).map(|(c, _)| c.systemd);
    let s = |mode, socket: &str| {
        Ok(SystemdSettings {
            mode,
            socket: PathBuf::from(socket),
        })
    };
    assert_eq!(parse(&[]), s(SystemdDbus::Auto, "/run/systemd/private"));
    for (arg, mode) in [
        ("--systemd-dbus=off", SystemdDbus::Off),
        // A Helm values file's unquoted `off` arrives as `false`.
        ("--systemd-dbus=false", SystemdDbus::Off),
        ("--systemd-dbus=on", SystemdDbus::On),
        ("--systemd-dbus=true", SystemdDbus::On),
    ] {
        assert_eq!(parse(&[arg]), s(mode, "/run/systemd/private"), "{arg}");
    }
    assert_eq!(
        parse(&["--systemd-socket", "/host-run-systemd/private"]),
        s(SystemdDbus::Auto, "/host-run-systemd/private")
    );
    assert!(parse(&["--systemd-dbus=maybe"]).is_err());
}

#[test]
fn colocation_flags() {
    let c = run(&[]).expect("valid").colocation;
    assert_eq!(
        (c.configmap_namespace.as_str(), c.configmap_name.as_str()),
        ("kube-system", "ack-slo-config")
    );
    assert_eq!(
        (
            c.sample_interval,
            c.report_interval,
            c.be_suppress_min_milli
        ),
        (Duration::from_secs(2), Duration::from_secs(60), 2_000)
    );
    let c = run(&[
        "--colocation=false",
        "--be-suppress-min-cpus",
        "0.2",
        "--colocation-sample-seconds",
        "0.5",
        "--slo-config-name",
        "slo",
    ])
    .expect("valid")
    .colocation;
    assert!(!c.enabled);
    assert_eq!(c.be_suppress_min_milli, 200);
    assert_eq!(c.sample_interval, Duration::from_millis(500));
    assert_eq!(c.configmap_name, "slo");
    for (bad, want) in [
        (
            "--be-suppress-min-cpus=-1",
            "--be-suppress-min-cpus must be in 0..=1024",
        ),
        (
            "--colocation-sample-seconds=0",
            "--colocation-sample-seconds must be a number of seconds in 0.1..=3600",
        ),
        (
            "--colocation-report-seconds=NaN",
            "--colocation-report-seconds must be a number of seconds in 0.1..=3600",
        ),
    ] {
        assert_eq!(run(&[bad]).map(|_| ()), Err(want.to_owned()), "{bad}");
    }
}

#[test]
fn endpoint_timeouts_are_checked() {
    for (args, want) in [
        (
            ["--metrics-header-read-timeout-seconds", "0"],
            "--metrics-header-read-timeout-seconds must be between 1 and 300, got 0",
        ),
        (
            ["--metrics-write-timeout-seconds", "301"],
            "--metrics-write-timeout-seconds must be between 1 and 300, got 301",
        ),
    ] {
        assert_eq!(run(&args).map(|_| ()), Err(want.to_owned()));
    }
}

#[test]
fn nri_flags() {
    let nri = |args: &[&str]| run(args).map(|r| r.nri);
    assert!(nri(&["--nri-plugin-index", "07"]).is_ok());
    for (bad, want) in [
        (
            "--nri-plugin-index=5",
            "--nri-plugin-index \"5\" must be two digits (00..=99)",
        ),
        (
            "--nri-plugin-index=a1",
            "--nri-plugin-index \"a1\" must be two digits (00..=99)",
        ),
        (
            "--nri-answer-deadline-ms=2000",
            "--nri-answer-deadline-ms must be in 10..=1900 (the runtime waits 2000 ms by default)",
        ),
        (
            "--nri-pod-wait-ms=5000",
            "--nri-pod-wait-ms must be in 0..=1000",
        ),
    ] {
        assert_eq!(nri(&[bad]).map(|_| ()), Err(want.to_owned()), "{bad}");
    }
    assert_eq!(nri(&["--nri=off"]).map(|n| n.mode), Ok(NriMode::Off));
}

#[test]
fn reclaim_values_are_refused_by_name_and_range() {
    let cases: [(&str, &str, Result<(), &str>); 6] = [
        ("100", "5", Ok(())),
        ("10", "1", Ok(())),
        ("10000", "100", Ok(())),
        (
            "9",
            "5",
            Err("--async-reclaim-interval-ms 9 must be 10..=10000"),
        ),
        (
            "100",
            "0",
            Err("--async-reclaim-cpu-percent 0 must be 1..=100"),
        ),
        (
            "100",
            "101",
            Err("--async-reclaim-cpu-percent 101 must be 1..=100"),
        ),
    ];
    for (interval, cpu, want) in cases {
        let got = run(&[
            "--async-reclaim-interval-ms",
            interval,
            "--async-reclaim-cpu-percent",
            cpu,
        ])
        .map(|_| ());
        assert_eq!(got, want.map_err(str::to_owned), "{interval} ms, {cpu}%");
    }
    let r = run(&["--be-first-reclaim=false"]).expect("valid").reclaim;
    assert!(
        r.enabled && !r.be_first && !r.throttle,
        "no throttle without BE-first"
    );
}

#[test]
fn the_write_budget_is_refused_out_of_range() {
    for (ms, want) in [
        ("50", Ok(())),
        ("1", Ok(())),
        ("1000", Ok(())),
        (
            "0",
            Err("--proactive-reclaim-write-budget-ms 0 must be 1..=1000"),
        ),
        (
            "1001",
            Err("--proactive-reclaim-write-budget-ms 1001 must be 1..=1000"),
        ),
    ] {
        let got = run(&["--proactive-reclaim-write-budget-ms", ms]).map(|_| ());
        assert_eq!(got, want.map_err(str::to_owned), "{ms} ms");
    }
}

#[test]
fn the_be_swap_percent_is_refused_out_of_range() {
    for (p, want) in [
        ("0", Ok(0)),
        ("50", Ok(50)),
        ("100", Ok(100)),
        ("101", Err("--be-swap-percent 101 must be 0..=100")),
    ] {
        let got = run(&["--be-swap-percent", p]).map(|rc| rc.be_swap.percent);
        assert_eq!(got, want.map_err(str::to_owned), "{p}%");
    }
}
