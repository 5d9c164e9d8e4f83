//! The systemd writes against a fake systemd manager: a D-Bus peer on a socket of its own that
//! speaks as systemd does on its private socket (`EXTERNAL` authentication, replies whose
//! sender is `org.freedesktop.systemd1`, a signal before every reply), records every
//! `SetUnitProperties`, answers as a test tells it (success, an error, no answer in time) and,
//! on success, writes the properties into the unit's files as systemd does. The passes run on
//! temporary trees laid out like the systemd driver.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_applier::node::ancestors::{KubeletMemoryQos, MemoryAncestors};
use koord_applier::node::colocation::suppress::BeParent;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::systemd::Units;
use koord_translator::cgroup::systemd::dbus::DbusSettings;
use koord_translator::cgroup::systemd::metrics::SystemdMetrics;
use koord_translator::cgroup::systemd::plan::Want;
use koord_translator::cgroup::systemd::property::{Mapped, map};
use koord_translator::cgroup::systemd::unit::UnitNamer;
use koord_translator::cgroup::systemd::wire;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion, Outcome};
use koord_translator::pod::apply::Applier;
use koord_translator::pod::report::PodStatus;
use koord_translator::pod::spec_view::PodSpecView;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

use crate::common::{self, Kernel, fixture, make_pod_tree, read};

/// What the fake manager does with the next calls.
#[derive(Debug, Clone)]
enum Answer {
    Ok,
    Refuse(&'static str, &'static str),
    Silent(Duration),
}

/// A property as the fake received it: its name, D-Bus signature and value.
type Prop = (String, String, u64);

/// One call as the fake received it: the unit, `runtime`, and its properties.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    unit: String,
    runtime: bool,
    properties: Vec<Prop>,
}

#[derive(Default)]
struct FakeState {
    calls: Vec<Recorded>,
    answer: Option<Answer>,
    /// Unit name -> its cgroup directory (written on success).
    dirs: HashMap<String, PathBuf>,
    /// Per call and property with a file: the unit, the file, what the file held when the call
    /// came and what systemd writes.
    before: Vec<(String, &'static str, String, String)>,
}

struct FakeManager {
    path: PathBuf,
    state: Arc<Mutex<FakeState>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The text systemd writes for a property, and the file.
fn systemd_writes(name: &str, v: u64) -> Option<(&'static str, String)> {
    let bytes = |v: u64| {
        if v == u64::MAX {
            "max".to_owned()
        } else {
            v.to_string()
        }
    };
    Some(match name {
        "MemoryMin" => ("memory.min", bytes(v)),
        "MemoryLow" => ("memory.low", bytes(v)),
        "MemoryHigh" => ("memory.high", bytes(v)),
        "MemoryMax" => ("memory.max", bytes(v)),
        "CPUWeight" => ("cpu.weight", v.to_string()),
        "CPUQuotaPerSecUSec" if v == u64::MAX => ("cpu.max", "max 100000".into()),
        "CPUQuotaPerSecUSec" => ("cpu.max", format!("{} 100000", v * 100_000 / 1_000_000)),
        _ => return None,
    })
}

impl FakeManager {
    fn start(path: &Path) -> Self {
        let state = Arc::new(Mutex::new(FakeState {
            answer: Some(Answer::Ok),
            ..FakeState::default()
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (st, p) = (state.clone(), path.to_owned());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&p).expect("bind");
                ready_tx.send(()).expect("ready");
                let mut stopped = stopped;
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        conn = listener.accept() => {
                            let Ok((s, _)) = conn else { return };
                            tokio::spawn(serve(s, st.clone()));
                        }
                    }
                }
            });
        });
        ready_rx.recv().expect("listening");
        Self {
            path: path.to_owned(),
            state,
            stop: Some(stop),
        }
    }

    fn answer(&self, a: Answer) {
        self.state.lock().expect("lock").answer = Some(a);
    }

    fn unit_dir(&self, unit: &str, dir: &Path) {
        self.state
            .lock()
            .expect("lock")
            .dirs
            .insert(unit.to_owned(), dir.to_owned());
    }

    fn take_calls(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().expect("lock").calls)
    }

    /// What each called property's file held when its call came (see [`FakeState::before`]).
    fn take_before(&self) -> Vec<(String, &'static str, String, String)> {
        std::mem::take(&mut self.state.lock().expect("lock").before)
    }
}

impl Drop for FakeManager {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(s: tokio::net::UnixStream, state: Arc<Mutex<FakeState>>) {
    let (read, mut write) = s.into_split();
    let mut read = BufReader::new(read);
    // EXTERNAL, then BEGIN, as sd-bus serves them.
    let mut line = Vec::new();
    if read.read_until(b'\n', &mut line).await.is_err()
        || !line.starts_with(b"\0AUTH EXTERNAL ")
        || write
            .write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
            .await
            .is_err()
    {
        return;
    }
    line.clear();
    if read.read_until(b'\n', &mut line).await.is_err() || line != b"BEGIN\r\n" {
        return;
    }
    let mut buf = Vec::new();
    let mut serial = 1000u32;
    loop {
        let len = loop {
            match wire::frame_len(&buf).expect("frame") {
                Some(len) if buf.len() >= len => break len,
                _ => {
                    let mut chunk = [0u8; 4096];
                    match read.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            }
        };
        let rest = buf.split_off(len);
        let msg = wire::decode(&std::mem::replace(&mut buf, rest)).expect("a message");
        if msg.member.as_deref() != Some("SetUnitProperties") {
            continue;
        }
        let (unit, runtime, properties) = wire::set_unit_properties_args(&msg).expect("(sba(sv))");
        let answer = {
            let mut st = state.lock().expect("lock");
            st.calls.push(Recorded {
                unit: unit.clone(),
                runtime,
                properties: properties.clone(),
            });
            let answer = st.answer.clone().unwrap_or(Answer::Ok);
            if let Some(dir) = st.dirs.get(&unit).cloned() {
                for (name, _, v) in &properties {
                    let Some((file, text)) = systemd_writes(name, *v) else {
                        continue;
                    };
                    let held = std::fs::read_to_string(dir.join(file))
                        .map(|t| t.trim().to_owned())
                        .unwrap_or_default();
                    st.before.push((unit.clone(), file, held, text.clone()));
                    if let Answer::Ok = answer {
                        std::fs::write(dir.join(file), format!("{text}\n")).expect("write");
                    }
                }
            }
            answer
        };
        // systemd sends its signals to every private connection, replies or not.
        serial += 1;
        if write
            .write_all(&wire::signal(serial, "UnitNew"))
            .await
            .is_err()
        {
            return;
        }
        serial += 1;
        let out = match answer {
            Answer::Ok => wire::reply(serial, msg.serial, None),
            Answer::Refuse(name, message) => wire::reply(serial, msg.serial, Some((name, message))),
            Answer::Silent(d) => {
                tokio::time::sleep(d).await;
                continue;
            }
        };
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn settings(socket: &Path) -> DbusSettings {
    DbusSettings {
        call_timeout: Duration::from_millis(300),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..DbusSettings::new(socket.to_owned())
    }
}

struct Setup {
    _tmp: tempfile::TempDir,
    layout: Layout,
    fake: FakeManager,
    units: Arc<Units>,
    metrics: SystemdMetrics,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = common::layout(
        &tmp.path().join("cg"),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
    );
    let socket = tmp.path().join("private");
    let fake = FakeManager::start(&socket);
    let metrics = SystemdMetrics::register(&prometheus::Registry::new()).expect("metrics");
    let units = Units::with_settings(
        UnitNamer::new(&layout).expect("systemd"),
        settings(&socket),
        Some(metrics.clone()),
    )
    .expect("start");
    assert!(units.is_up(), "connected to the fake manager");
    Setup {
        _tmp: tmp,
        layout,
        fake,
        units: Arc::new(units),
        metrics,
    }
}

fn ls_redis() -> PodSpecView {
    PodSpecView::from_pod(&fixture("ls-redis.json")).expect("view")
}

/// Tells the fake manager which directory each unit of `dirs` is (as systemd knows it).
fn register_units(s: &Setup, dirs: &[PathBuf]) {
    for d in dirs {
        let unit = d.file_name().and_then(|n| n.to_str()).expect("name");
        s.fake.unit_dir(unit, d);
    }
}

/// The properties a report's knobs on `dir` map to, by name.
fn expected_properties(knobs: &[(PathBuf, &str, String)], dir: &Path) -> BTreeMap<String, u64> {
    knobs
        .iter()
        .filter(|(d, _, _)| d == dir)
        .filter_map(|(_, f, t)| match map(f, t) {
            Mapped::Properties(p) => Some(p),
            _ => None,
        })
        .flatten()
        .map(|p| (p.name.to_owned(), p.value))
        .collect()
}

/// A pod's pass: one call per unit (the pod slice and each container scope), runtime, every
/// property a `t`, all the unit's values of the pass in it and no plain file's; the values in
/// the files; nothing called again while nothing changes; a reset file calls its unit again
/// with every value of that unit.
#[test]
fn pod_pass_sets_each_unit_in_one_runtime_call() {
    let s = setup();
    let v = ls_redis();
    let dirs = make_pod_tree(&s.layout, Kernel::MainlineV2, &v);
    register_units(&s, &dirs);
    let applier = Applier::new(s.layout.clone(), false, None).with_systemd(Some(s.units.clone()));
    let r = applier.apply(&v);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    let knobs: Vec<(PathBuf, &str, String)> = r
        .knobs
        .iter()
        .map(|k| (k.path.dir.to_path_buf(), k.file, k.new.clone()))
        .collect();
    let calls = s.fake.take_calls();
    let called: BTreeSet<&str> = calls.iter().map(|c| c.unit.as_str()).collect();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    assert_eq!(called.len(), 3, "one call per unit: {calls:#?}");
    for c in &calls {
        assert!(c.runtime, "runtime=true: {c:?}");
        let dir = dirs
            .iter()
            .find(|d| d.file_name().and_then(|n| n.to_str()) == Some(&c.unit))
            .expect("a unit of the pod");
        let got: BTreeMap<String, u64> = c
            .properties
            .iter()
            .map(|(n, sig, v)| {
                assert_eq!(sig, "t", "{n} is a u64");
                (n.clone(), *v)
            })
            .collect();
        assert_eq!(got, expected_properties(&knobs, dir), "{}", c.unit);
    }
    let redis = dirs
        .iter()
        .find(|d| {
            d.ends_with(format!(
                "cri-containerd-{}.scope",
                "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
            ))
        })
        .expect("redis scope");
    for (file, want) in [
        ("memory.min", "52428800"),
        ("memory.low", "52428800"),
        ("memory.high", "83886080"),
        ("memory.oom.group", "0"),
    ] {
        assert_eq!(read(&redis.join(file)), want, "{file}");
    }
    // Nothing differs and systemd stores it all: no call, nothing written.
    let r = applier.apply(&v);
    assert_eq!(r.status, PodStatus::Unchanged, "{r:#?}");
    assert_eq!(s.fake.take_calls(), Vec::new());
    // systemd re-applied something else over one file: that unit again, with all its values.
    std::fs::write(redis.join("memory.min"), "0\n").expect("reset");
    let r = applier.apply(&v);
    let calls = s.fake.take_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(
        calls[0]
            .properties
            .iter()
            .map(|p| p.0.as_str())
            .collect::<Vec<_>>(),
        ["MemoryHigh", "MemoryLow", "MemoryMin"]
    );
    let min = r
        .knobs
        .iter()
        .find(|k| k.path.dir.as_ref() == redis.as_path() && k.file == "memory.min")
        .expect("knob");
    assert_eq!(
        (min.outcome, min.old.as_deref()),
        (Outcome::Written, Some("0"))
    );
    assert_eq!(read(&redis.join("memory.min")), "52428800");
    assert_eq!(s.metrics.calls.with_label_values(&["ok"]).get(), 4);
}

/// The ancestors' sums go to their slices, both files of a slice in one call; the files the
/// kubelet's own Memory QoS owns are never in a call.
#[test]
fn ancestors_set_their_slices_and_leave_the_kubelets_properties() {
    let s = setup();
    let v = ls_redis();
    let dirs = make_pod_tree(&s.layout, Kernel::MainlineV2, &v);
    register_units(&s, &dirs);
    let ancestors = common::ancestor_dirs(&s.layout);
    register_units(&s, &ancestors);
    std::fs::write(dirs[0].join("memory.min"), "73400320\n").expect("pod value");
    let pass = |mode| {
        MemoryAncestors::new(s.layout.clone(), false, mode, None)
            .with_systemd(Some(s.units.clone()))
            .reconcile()
    };
    let report = pass(KubeletMemoryQos::Off);
    assert_eq!(report.count(Outcome::Failed), 0, "{report:#?}");
    let calls: Vec<(String, Vec<String>)> = s
        .fake
        .take_calls()
        .into_iter()
        .map(|c| (c.unit, c.properties.into_iter().map(|p| p.0).collect()))
        .collect();
    let both = vec!["MemoryLow".to_owned(), "MemoryMin".to_owned()];
    assert_eq!(
        calls,
        vec![
            ("kubepods-burstable.slice".to_owned(), both.clone()),
            ("kubepods-besteffort.slice".to_owned(), both.clone()),
            ("kubepods.slice".to_owned(), both.clone()),
        ]
    );
    assert_eq!(read(&ancestors[0].join("memory.min")), "73400320");
    assert_eq!(read(&ancestors[2].join("memory.min")), "73400320");
    // The files are in force before systemd is asked to store them: a slow systemd (the kubelet
    // restarting) cannot hold a repair back, not even the last level's.
    let before = s.fake.take_before();
    assert_eq!(before.len(), 6, "{before:?}");
    for (unit, file, held, stored) in &before {
        assert_eq!(
            held, stored,
            "{unit} {file} held {held} when systemd was asked for {stored}"
        );
    }
    // A fresh record (a new applier) with the kubelet's TieredReservation: kubepods' two files
    // and burstable's memory.low are the kubelet's.
    let fresh = setup();
    let dirs = make_pod_tree(&fresh.layout, Kernel::MainlineV2, &v);
    register_units(&fresh, &dirs);
    register_units(&fresh, &common::ancestor_dirs(&fresh.layout));
    let report = MemoryAncestors::new(fresh.layout.clone(), false, KubeletMemoryQos::Tiered, None)
        .with_systemd(Some(fresh.units.clone()))
        .reconcile();
    assert_eq!(report.count(Outcome::Failed), 0, "{report:#?}");
    let calls: Vec<(String, Vec<String>)> = fresh
        .fake
        .take_calls()
        .into_iter()
        .map(|c| (c.unit, c.properties.into_iter().map(|p| p.0).collect()))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "kubepods-burstable.slice".to_owned(),
                vec!["MemoryMin".to_owned()]
            ),
            ("kubepods-besteffort.slice".to_owned(), both),
        ]
    );
}

/// systemd refuses: the files are written all the same, the refusal is counted, the
/// connection stays; a property this systemd does not know goes to the files from then on.
#[test]
fn a_refusal_falls_back_to_the_files() {
    let s = setup();
    let v = ls_redis();
    let dirs = make_pod_tree(&s.layout, Kernel::MainlineV2, &v);
    register_units(&s, &dirs);
    s.fake.answer(Answer::Refuse(
        "org.freedesktop.DBus.Error.AccessDenied",
        "Access denied",
    ));
    let applier = Applier::new(s.layout.clone(), false, None).with_systemd(Some(s.units.clone()));
    let r = applier.apply(&v);
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    assert_eq!(read(&dirs[0].join("memory.min")), "73400320");
    let m = |l| s.metrics.calls.with_label_values(&[l]).get();
    assert_eq!(
        (m("refused"), m("lost"), m("timeout")),
        (3, 0, 0),
        "{:?}",
        s.fake.take_calls()
    );
    assert_eq!(s.fake.take_calls().len(), 3);
    assert_eq!(s.metrics.fallback.with_label_values(&["refused"]).get(), 3);
    assert_eq!(s.metrics.up.get(), 1, "a refusal keeps the connection");
    // Refused units are not called again only to store what their files already hold.
    assert_eq!(applier.apply(&v).status, PodStatus::Unchanged);
    assert!(s.fake.take_calls().is_empty());

    // An older systemd without CPUQuotaPeriodUSec: that value is a file from then on.
    let be = s
        .layout
        .root
        .join("kubepods.slice/kubepods-besteffort.slice");
    std::fs::create_dir_all(&be).expect("mkdir");
    s.fake.unit_dir("kubepods-besteffort.slice", &be);
    s.fake.answer(Answer::Refuse(
        "org.freedesktop.DBus.Error.PropertyReadOnly",
        "Cannot set property CPUQuotaPeriodUSec, or unknown property.",
    ));
    let want = |text: &'static str| Want {
        dir: &be,
        file: "cpu.max",
        text,
        differs: true,
    };
    let min = Want {
        dir: &be,
        file: "memory.min",
        text: "0",
        differs: false,
    };
    assert_eq!(s.units.store(&[want("25000 50000"), min]), [false, false]);
    assert_eq!(s.fake.take_calls().len(), 1);
    s.fake.answer(Answer::Ok);
    // Without the unknown property at once: the unit's other value is stored.
    assert_eq!(s.units.store(&[want("30000 50000"), min]), [false, true]);
    let calls = s.fake.take_calls();
    assert_eq!(
        calls.iter().map(|c| c.properties.len()).collect::<Vec<_>>(),
        [1],
        "MemoryMin alone: {calls:?}"
    );
    assert_eq!(s.units.store(&[want("30000 100000")]), [true]);
    assert_eq!(s.fake.take_calls().len(), 1);
}

/// No answer in time: the pass goes on with the files after one call timeout, the connection
/// is dropped (later calls answer at once), and it comes back by itself with backoff; the
/// values are then stored again although the files hold them.
#[test]
fn a_timeout_bounds_the_pass_and_the_connection_comes_back() {
    let s = setup();
    let v = ls_redis();
    let dirs = make_pod_tree(&s.layout, Kernel::MainlineV2, &v);
    register_units(&s, &dirs);
    s.fake.answer(Answer::Silent(Duration::from_secs(3)));
    let applier = Applier::new(s.layout.clone(), false, None).with_systemd(Some(s.units.clone()));
    let t0 = Instant::now();
    let r = applier.apply(&v);
    let took = t0.elapsed();
    assert_eq!(r.status, PodStatus::Applied, "{r:#?}");
    assert!(
        took < Duration::from_millis(1500),
        "one timeout (300 ms) and then the files at once, not one per unit: {took:?}"
    );
    assert_eq!(s.metrics.calls.with_label_values(&["timeout"]).get(), 1);
    assert_eq!(s.metrics.fallback.with_label_values(&["timeout"]).get(), 1);
    assert!(
        s.metrics.fallback.with_label_values(&["unreachable"]).get() >= 1,
        "the units after the timeout went to the files at once"
    );
    assert_eq!(
        read(&dirs[1].join("memory.min")),
        read(&dirs[1].join("memory.low"))
    );
    s.fake.answer(Answer::Ok);
    s.fake.take_calls();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.units.is_up() {
        assert!(Instant::now() < deadline, "not reconnected");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        s.metrics
            .connections
            .with_label_values(&["connected"])
            .get()
            >= 2
    );
    assert_eq!(s.metrics.up.get(), 1);
    // Reconnected: what systemd stores is not known any more, every unit is set again.
    assert_eq!(applier.apply(&v).status, PodStatus::Unchanged);
    assert_eq!(s.fake.take_calls().len(), 3);
}

/// systemd not there at the start: at once to the files, counted; once its socket appears
/// the applier connects by itself.
#[test]
fn unreachable_then_there() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = common::layout(
        &tmp.path().join("cg"),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
    );
    let socket = tmp.path().join("private");
    let metrics = SystemdMetrics::register(&prometheus::Registry::new()).expect("metrics");
    let units = Units::with_settings(
        UnitNamer::new(&layout).expect("systemd"),
        settings(&socket),
        Some(metrics.clone()),
    )
    .expect("start");
    assert!(!units.is_up());
    let be = layout.root.join("kubepods.slice/kubepods-besteffort.slice");
    std::fs::create_dir_all(&be).expect("mkdir");
    let want = [Want {
        dir: &be,
        file: "memory.min",
        text: "0",
        differs: false,
    }];
    // Unreachable: each store falls back at once, no connection attempt waited out per call
    // (one would cost its timeout, 100 of them seconds); 1 s leaves a loaded machine room.
    let t0 = Instant::now();
    for _ in 0..100 {
        assert_eq!(units.store(&want), [false]);
    }
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "100 stores with systemd unreachable took {:?}",
        t0.elapsed()
    );
    assert_eq!(
        metrics.fallback.with_label_values(&["unreachable"]).get(),
        100
    );
    assert_eq!(metrics.up.get(), 0);
    let fake = FakeManager::start(&socket);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !units.is_up() {
        assert!(Instant::now() < deadline, "not connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(units.store(&want), [true]);
    assert_eq!(fake.take_calls().len(), 1);
}

/// BE suppression on the systemd driver: the BestEffort slice's quota as its
/// `CPUQuotaPerSecUSec`, lifted as infinity.
#[test]
fn be_suppression_sets_the_slice_quota() {
    let s = setup();
    let be = s
        .layout
        .root
        .join("kubepods.slice/kubepods-besteffort.slice");
    std::fs::create_dir_all(&be).expect("mkdir");
    std::fs::write(be.join("cpu.max"), "max 100000\n").expect("seed");
    s.fake.unit_dir("kubepods-besteffort.slice", &be);
    let mut parent = BeParent::new(&s.layout).expect("be parent");
    parent.writer = Arc::new(
        koord_applier::node::writer::NodeWriter::new(false, false)
            .with_systemd(Some(s.units.clone())),
    );
    let applied = parent.set_quota(150_000).expect("quota");
    assert!(applied.changed);
    assert_eq!(read(&be.join("cpu.max")), "150000 100000");
    let lifted = parent.set_quota(-1).expect("lift");
    assert!(lifted.changed);
    assert_eq!(read(&be.join("cpu.max")), "max 100000");
    let calls: Vec<(String, Vec<Prop>)> = s
        .fake
        .take_calls()
        .into_iter()
        .map(|c| (c.unit, c.properties))
        .collect();
    let quota = |v| vec![("CPUQuotaPerSecUSec".to_owned(), "t".to_owned(), v)];
    assert_eq!(
        calls,
        vec![
            ("kubepods-besteffort.slice".to_owned(), quota(1_500_000)),
            ("kubepods-besteffort.slice".to_owned(), quota(u64::MAX)),
        ]
    );
}
