//! On a real systemd: a value set through the applier's connection is stored by systemd and
//! is still in the file after `systemctl daemon-reload`, where a value only written into the
//! file is reset. Ignored: it needs systemd as PID 1 with its private socket and a kubelet on
//! the systemd driver (cgroup v2), as root; the systemd node of tests/node-v2 runs it in its guest
//! before the product is installed (the applier would set the same slice to its sum), in
//! `make test`; by hand:
//!
//! ```sh
//! tests/node-v2/node.sh sh "$(ls -t $CARGO_TARGET_DIR/debug/deps/it-* | grep -v '\.d$' | head -1) \
//!     --ignored --exact systemd_real::a_value_set_through_systemd_survives_daemon_reload --nocapture"
//! ```
//!
//! `KOORD_REAL_SYSTEMD_KUBELET_WAIT=65` also waits out one of the kubelet's periodic QoS updates.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use koord_applier::config::CgroupConfig;
use koord_translator::cgroup::layout::KubeQos;
use koord_translator::cgroup::systemd::Units;
use koord_translator::cgroup::systemd::dbus::DbusSettings;
use koord_translator::cgroup::systemd::plan::Want;
use koord_translator::cgroup::systemd::unit::UnitNamer;
use koord_translator::cgroup::{CgroupDriver, Controller};

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_owned()
}

#[test]
#[ignore = "needs systemd as PID 1 and a kubelet on the systemd driver (the systemd node of tests/node-v2)"]
fn a_value_set_through_systemd_survives_daemon_reload() {
    // The flags' defaults: the host's hierarchy, everything detected.
    let layout = CgroupConfig {
        root: "/sys/fs/cgroup".into(),
        version: None,
        driver: None,
        kubelet_root: None,
    }
    .layout()
    .expect("layout");
    assert_eq!(layout.driver, CgroupDriver::Systemd, "{layout:?}");
    let dir = layout
        .dir(
            &layout.qos_parent_dir(KubeQos::Burstable),
            Controller::Memory,
        )
        .expect("dir");
    let unit = dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("unit")
        .to_owned();
    let file = dir.join("memory.min");
    let before = read(&file);
    let t0 = Instant::now();
    let units = Units::with_settings(
        UnitNamer::new(&layout).expect("systemd on v2"),
        DbusSettings::new("/run/systemd/private".into()),
        None,
    )
    .expect("start");
    assert!(units.is_up(), "not connected to /run/systemd/private");
    let connected = t0.elapsed();
    let set = |text: &str| {
        let t = Instant::now();
        let held = units.store(&[Want {
            dir: &dir,
            file: "memory.min",
            text,
            differs: true,
        }]);
        assert_eq!(held, [true], "SetUnitProperties {unit} MemoryMin={text}");
        t.elapsed()
    };
    let want = if before == "50331648" {
        "41943040"
    } else {
        "50331648"
    };
    let call = set(want);
    assert_eq!(read(&file), want, "systemd wrote the file");
    let stored = sh(&format!("systemctl show -p MemoryMin --value {unit}"));
    assert_eq!(stored, want, "systemctl show {unit}");
    sh("systemctl daemon-reload");
    assert_eq!(read(&file), want, "after daemon-reload");
    let waited = std::env::var("KOORD_REAL_SYSTEMD_KUBELET_WAIT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(s) = waited {
        let end = Instant::now() + Duration::from_secs(s);
        while Instant::now() < end {
            assert_eq!(read(&file), want, "after a kubelet QoS update");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    // The contrast: a value only written into the file is reset by the next re-apply.
    std::fs::write(&file, "8388608").expect("write");
    assert_eq!(read(&file), "8388608");
    sh("systemctl daemon-reload");
    let reset = read(&file);
    assert_eq!(reset, want, "daemon-reload puts back what systemd stores");
    // Leave the node as it was.
    set(&before);
    sh("systemctl daemon-reload");
    assert_eq!(read(&file), before);
    println!(
        "figure real systemd: {unit} MemoryMin={want} set in {call:?} (connected in {connected:?}); \
         file {want} after daemon-reload{}; a file-only 8388608 reset to {reset} by daemon-reload; \
         restored to {before}",
        waited.map_or(String::new(), |s| format!(
            " and {s} s of kubelet QoS updates"
        ))
    );
}
