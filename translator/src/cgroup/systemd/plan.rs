//! The write plan on systemd units: which `SetUnitProperties` calls a pass makes. Pure.
//!
//! Every `SetUnitProperties` makes systemd re-apply what it stores for the unit, and so does
//! every other re-apply (the kubelet's QoS updates, `daemon-reload`): a value of ours that
//! systemd does not store is undone. So all the properties of one pass's knobs on one unit go
//! into one call, and a unit gets a call when one of its files differs from what the pass wants
//! or when systemd is not known to store every one of those values yet (after a start, or after
//! a time the applier could only write the files). [`Record`] is what the applier knows systemd
//! stores: what its successful calls set.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use super::property::{Mapped, Property, map};
use super::unit::UnitNamer;

/// A unit whose call failed is not called again for this long just to store values its files
/// already hold (a file that differs is always tried).
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(600);
/// Units not planned for this long are dropped from the record (their pod is gone).
pub const RECORD_TTL: Duration = Duration::from_secs(1800);

/// One knob a pass wants: the directory, the file, the text, and whether the file holds
/// something else now.
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    pub dir: &'a Path,
    pub file: &'a str,
    pub text: &'a str,
    pub differs: bool,
}

/// One `SetUnitProperties` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitCall {
    pub unit: String,
    /// Sorted by name.
    pub properties: Vec<Property>,
    /// The wants (indices) whose value the call sets.
    pub wants: Vec<usize>,
}

/// A pass's calls, and the wants systemd cannot take (written as files only), with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planned {
    pub calls: Vec<UnitCall>,
    pub inexpressible: Vec<(usize, String)>,
}

#[derive(Debug, Clone)]
struct Entry {
    stored: BTreeMap<&'static str, u64>,
    failed_at: Option<Instant>,
    used: Instant,
}

/// What systemd stores of ours, per unit, as the applier's successful calls set it.
#[derive(Debug, Clone, Default)]
pub struct Record {
    units: HashMap<String, Entry>,
}

impl Record {
    fn entry(&mut self, unit: &str, now: Instant) -> &mut Entry {
        self.units.entry(unit.to_owned()).or_insert_with(|| Entry {
            stored: BTreeMap::new(),
            failed_at: None,
            used: now,
        })
    }

    /// A call that succeeded: systemd stores these values now.
    pub fn stored(&mut self, unit: &str, properties: &[Property], now: Instant) {
        let e = self.entry(unit, now);
        for p in properties {
            e.stored.insert(p.name, p.value);
        }
        e.failed_at = None;
        e.used = now;
    }

    /// A call that failed: whatever it carried may not be stored. `hold_off`: the unit is not
    /// called again for [`RETRY_AFTER_FAILURE`] unless a file differs (not after a refusal the
    /// next plan avoids by itself, such as a property this systemd does not know).
    pub fn failed(&mut self, unit: &str, properties: &[Property], hold_off: bool, now: Instant) {
        let e = self.entry(unit, now);
        for p in properties {
            e.stored.remove(p.name);
        }
        if hold_off {
            e.failed_at = Some(now);
        }
        e.used = now;
    }

    /// Forgets every unit: systemd may have lost what it stored (it was unreachable).
    pub fn clear(&mut self) {
        self.units.clear();
    }

    /// Drops units not planned for [`RECORD_TTL`].
    pub fn sweep(&mut self, now: Instant) {
        self.units
            .retain(|_, e| now.saturating_duration_since(e.used) < RECORD_TTL);
    }

    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    fn holds(&self, unit: &str, p: &Property) -> bool {
        self.units
            .get(unit)
            .is_some_and(|e| e.stored.get(p.name) == Some(&p.value))
    }

    fn failed_recently(&self, unit: &str, now: Instant) -> bool {
        self.units
            .get(unit)
            .and_then(|e| e.failed_at)
            .is_some_and(|t| now.saturating_duration_since(t) < RETRY_AFTER_FAILURE)
    }

    fn touch(&mut self, unit: &str, now: Instant) {
        if let Some(e) = self.units.get_mut(unit) {
            e.used = now;
        }
    }
}

/// The calls for `wants`: one per unit that needs one, with every property of that unit's
/// wants. `unsupported`: properties this systemd refused as unknown (left to the files).
pub fn plan(
    namer: &UnitNamer,
    wants: &[Want<'_>],
    unsupported: &BTreeSet<&'static str>,
    record: &mut Record,
    now: Instant,
) -> Planned {
    let mut out = Planned::default();
    // Units in order of first appearance.
    let mut units: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, w) in wants.iter().enumerate() {
        let Some(unit) = namer.unit(w.dir) else {
            continue;
        };
        match units.iter_mut().find(|(u, _)| *u == unit) {
            Some((_, idx)) => idx.push(i),
            None => units.push((unit, vec![i])),
        }
    }
    for (unit, idx) in units {
        let mut properties: BTreeMap<&'static str, Property> = BTreeMap::new();
        let mut covered = Vec::new();
        let mut differs = false;
        for i in idx {
            let w = &wants[i];
            match map(w.file, w.text) {
                Mapped::NotSystemd => {}
                Mapped::Inexpressible(why) => out.inexpressible.push((i, why)),
                Mapped::Properties(ps) => {
                    if let Some(p) = ps.iter().find(|p| unsupported.contains(p.name)) {
                        out.inexpressible
                            .push((i, format!("this systemd does not know {}", p.name)));
                        continue;
                    }
                    for p in ps {
                        properties.insert(p.name, p);
                    }
                    covered.push(i);
                    differs |= w.differs;
                }
            }
        }
        if covered.is_empty() {
            continue;
        }
        let properties: Vec<Property> = properties.into_values().collect();
        let unstored = properties.iter().any(|p| !record.holds(&unit, p));
        record.touch(&unit, now);
        if differs || (unstored && !record.failed_recently(&unit, now)) {
            out.calls.push(UnitCall {
                unit,
                properties,
                wants: covered,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::layout::Layout;
    use crate::cgroup::{CgroupDriver, CgroupVersion};
    use std::path::PathBuf;

    const KP: &str = "/cg/kubepods.slice";

    fn namer() -> UnitNamer {
        UnitNamer::new(&Layout::new(
            "/cg",
            CgroupVersion::V2,
            CgroupDriver::Systemd,
        ))
        .expect("systemd")
    }

    fn p(name: &'static str, value: u64) -> Property {
        Property { name, value }
    }

    struct Case {
        wants: Vec<(String, &'static str, &'static str, bool)>,
        want_calls: Vec<(&'static str, Vec<Property>, Vec<usize>)>,
    }

    fn run(record: &mut Record, unsupported: &BTreeSet<&'static str>, c: &Case) -> Planned {
        let dirs: Vec<PathBuf> = c.wants.iter().map(|w| PathBuf::from(&w.0)).collect();
        let wants: Vec<Want<'_>> = c
            .wants
            .iter()
            .zip(&dirs)
            .map(|(w, d)| Want {
                dir: d,
                file: w.1,
                text: w.2,
                differs: w.3,
            })
            .collect();
        plan(&namer(), &wants, unsupported, record, Instant::now())
    }

    fn calls(p: &Planned) -> Vec<(&str, Vec<Property>, Vec<usize>)> {
        p.calls
            .iter()
            .map(|c| (c.unit.as_str(), c.properties.clone(), c.wants.clone()))
            .collect()
    }

    /// One pod's knobs on its slice and its container's scope, interleaved: one call per unit
    /// with every property of that unit, the plain files left out.
    #[test]
    fn groups_every_knob_of_a_unit_into_one_call() {
        let pod = format!("{KP}/kubepods-burstable.slice/kubepods-burstable-podab_cd.slice");
        let c = format!("{pod}/cri-containerd-ab12.scope");
        let case = Case {
            wants: vec![
                (pod.clone(), "memory.min", "134217728", true),
                (c.clone(), "memory.min", "134217728", false),
                (pod.clone(), "memory.low", "134217728", false),
                (c.clone(), "memory.oom.group", "1", true),
                (c.clone(), "memory.high", "max", false),
                (c.clone(), "cpu.max", "50000 100000", false),
                (c.clone(), "cpu.weight", "39", false),
            ],
            want_calls: vec![
                (
                    "kubepods-burstable-podab_cd.slice",
                    vec![p("MemoryLow", 134_217_728), p("MemoryMin", 134_217_728)],
                    vec![0, 2],
                ),
                (
                    "cri-containerd-ab12.scope",
                    vec![
                        p("CPUQuotaPerSecUSec", 500_000),
                        p("CPUWeight", 39),
                        p("MemoryHigh", u64::MAX),
                        p("MemoryMin", 134_217_728),
                    ],
                    vec![1, 4, 5, 6],
                ),
            ],
        };
        let mut record = Record::default();
        let planned = run(&mut record, &BTreeSet::new(), &case);
        assert_eq!(calls(&planned), case.want_calls);
        assert!(planned.inexpressible.is_empty());
    }

    /// The second pass after a successful one calls nothing; a file that differs calls its
    /// unit again with all of its properties; a failed unit is retried only when a file differs.
    #[test]
    fn the_record_decides_which_units_are_called() {
        let burst = format!("{KP}/kubepods-burstable.slice");
        let be = format!("{KP}/kubepods-besteffort.slice");
        let steady = |min_differs: bool| Case {
            wants: vec![
                (burst.clone(), "memory.min", "201326592", min_differs),
                (burst.clone(), "memory.low", "234881024", false),
                (be.clone(), "memory.min", "0", false),
                (be.clone(), "memory.low", "0", false),
            ],
            want_calls: Vec::new(),
        };
        let mut record = Record::default();
        let none = BTreeSet::new();
        // First pass: nothing known to be stored, every unit is called although no file differs.
        let first = run(&mut record, &none, &steady(false));
        assert_eq!(first.calls.len(), 2);
        let now = Instant::now();
        for c in &first.calls {
            record.stored(&c.unit, &c.properties, now);
        }
        assert!(run(&mut record, &none, &steady(false)).calls.is_empty());
        // systemd reset one file: that unit is called, with both of its properties.
        let again = run(&mut record, &none, &steady(true));
        assert_eq!(
            calls(&again),
            vec![(
                "kubepods-burstable.slice",
                vec![p("MemoryLow", 234_881_024), p("MemoryMin", 201_326_592)],
                vec![0, 1]
            )]
        );
        // The BE slice's call failed: not retried while its files hold the values...
        let be_props = [p("MemoryLow", 0), p("MemoryMin", 0)];
        record.failed("kubepods-besteffort.slice", &be_props, false, now);
        assert_eq!(run(&mut record, &none, &steady(false)).calls.len(), 1);
        record.failed("kubepods-besteffort.slice", &be_props, true, now);
        assert!(run(&mut record, &none, &steady(false)).calls.is_empty());
        // ...but a new value (another property of the same unit from another pass) is.
        let mut quota = steady(false);
        quota.wants = vec![(be.clone(), "cpu.max", "500000 100000", true)];
        assert_eq!(
            calls(&run(&mut record, &none, &quota)),
            vec![(
                "kubepods-besteffort.slice",
                vec![p("CPUQuotaPerSecUSec", 5_000_000)],
                vec![0]
            )]
        );
        // Another pass's property stored on the same unit does not make this one call.
        record.stored(
            "kubepods-besteffort.slice",
            &[p("CPUQuotaPerSecUSec", 5_000_000)],
            now,
        );
        record.stored("kubepods-besteffort.slice", &be_props, now);
        assert!(run(&mut record, &none, &steady(false)).calls.is_empty());
        // Forgotten (systemd was unreachable): every unit again.
        record.clear();
        assert_eq!(run(&mut record, &none, &steady(false)).calls.len(), 2);
    }

    /// Values systemd cannot say, properties it does not know and directories that are no
    /// units stay with the files.
    #[test]
    fn what_stays_with_the_files() {
        let be = format!("{KP}/kubepods-besteffort.slice");
        let case = Case {
            wants: vec![
                (be.clone(), "cpu.max", "max 50000", true),
                (be.clone(), "cpu.max", "25000 50000", true),
                (be.clone(), "memory.min", "0", true),
                ("/cg/kubelet.slice".to_owned(), "memory.min", "0", true),
                (
                    "/cg/kubepods/besteffort".to_owned(),
                    "memory.min",
                    "0",
                    true,
                ),
            ],
            want_calls: vec![(
                "kubepods-besteffort.slice",
                vec![p("MemoryMin", 0)],
                vec![2],
            )],
        };
        let unsupported = BTreeSet::from(["CPUQuotaPeriodUSec"]);
        let planned = run(&mut Record::default(), &unsupported, &case);
        assert_eq!(calls(&planned), case.want_calls);
        let why: Vec<(usize, &str)> = planned
            .inexpressible
            .iter()
            .map(|(i, w)| (*i, w.as_str()))
            .collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].1.contains("default period"), "{why:?}");
        assert_eq!(why[1], (1, "this systemd does not know CPUQuotaPeriodUSec"));
    }

    #[test]
    fn the_record_forgets_units_not_seen() {
        let mut record = Record::default();
        let t0 = Instant::now();
        record.stored("a.scope", &[p("MemoryMin", 1)], t0);
        record.sweep(t0 + RECORD_TTL / 2);
        assert_eq!(record.len(), 1);
        record.sweep(t0 + RECORD_TTL);
        assert!(record.is_empty());
    }
}
