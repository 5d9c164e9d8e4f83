//! Cycles and instructions per container: one counter group per online CPU per container
//! (leader = cycles, member = instructions), enabled for the window, read, scaled for
//! multiplexing, summed over CPUs and closed, as Koordinator's grouped (libpfm4) path does.

use std::os::fd::AsFd;
use std::path::Path;

use super::perf_sys::{CounterGroup, Event, GroupReading, PerfError};

/// The events of the CPI group; the first leads. Software clocks stand in for the hardware
/// events in tests on machines without a PMU: same code path, different event type.
pub const CPI_EVENTS: [Event; 2] = [Event::Cycles, Event::Instructions];

/// What the start-up probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PmuStatus {
    Supported,
    /// No such hardware event here (a VM without virtual PMU).
    NoPmu(String),
    /// The events exist but the agent may not use them.
    NoPermission(String),
    Failed(String),
}

/// Opens (and closes) the CPI events on the calling thread: the cheapest question the kernel
/// answers with the same errors the cgroup counters would get.
pub fn probe(events: &[Event]) -> PmuStatus {
    match CounterGroup::open_self(events) {
        Ok(_) => PmuStatus::Supported,
        Err(e @ PerfError::Unsupported(_)) => PmuStatus::NoPmu(e.to_string()),
        Err(e @ PerfError::Permission(_)) => PmuStatus::NoPermission(e.to_string()),
        Err(e) => PmuStatus::Failed(e.to_string()),
    }
}

/// A count corrected for multiplexing: `value * time_enabled / time_running`. `None` when the
/// group was enabled but never got the PMU (nothing was measured, so nothing can be said).
pub fn scale(value: u64, time_enabled: u64, time_running: u64) -> Option<u64> {
    if time_enabled == 0 {
        // The cgroup never ran on this CPU during the window: a true zero.
        return Some(value);
    }
    if time_running == 0 {
        return None;
    }
    if time_running >= time_enabled {
        return Some(value);
    }
    let scaled = u128::from(value) * u128::from(time_enabled) / u128::from(time_running);
    Some(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// Sums the scaled counts of one container's groups over its CPUs. `None` when no CPU on
/// which the cgroup ran had its counters scheduled.
pub fn sum_scaled<const N: usize>(readings: &[GroupReading]) -> Option<[u64; N]> {
    let mut sums = [0u64; N];
    let mut measured = false;
    let mut active = false;
    for r in readings {
        if r.time_enabled > 0 {
            active = true;
        }
        let mut ok = true;
        let mut scaled = [0u64; N];
        for (i, s) in scaled.iter_mut().enumerate() {
            match r
                .values()
                .get(i)
                .and_then(|&v| scale(v, r.time_enabled, r.time_running))
            {
                Some(v) => *s = v,
                None => ok = false,
            }
        }
        if ok {
            measured |= r.time_enabled > 0;
            for (sum, v) in sums.iter_mut().zip(scaled) {
                *sum = sum.saturating_add(v);
            }
        }
    }
    (measured || !active).then_some(sums)
}

/// One container's groups for a window: one per CPU it could be opened on.
pub struct ContainerCounters {
    groups: Vec<CounterGroup>,
}

/// Opens a group per CPU for the cgroup at `dir`. An error only if no CPU could be opened;
/// the error of the first CPU is returned (it classifies the node: no PMU, no permission).
pub fn open_container(
    dir: &Path,
    cpus: &[u32],
    events: &[Event],
) -> Result<ContainerCounters, PerfError> {
    let fd = koord_translator::cgroup::file::open_dir(dir).map_err(PerfError::Other)?;
    let mut groups = Vec::with_capacity(cpus.len());
    let mut first_err = None;
    for &cpu in cpus {
        match CounterGroup::open_cgroup(fd.as_fd(), cpu, events) {
            Ok(g) => groups.push(g),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match (groups.is_empty(), first_err) {
        (true, Some(e)) => Err(e),
        _ => Ok(ContainerCounters { groups }),
    }
}

impl ContainerCounters {
    pub fn enable(&self) {
        for g in &self.groups {
            // An ioctl on a descriptor we just opened only fails if the event died with its
            // cgroup; the read after the window then says so.
            let _ = g.reset_and_enable();
        }
    }

    /// Stops, reads and sums; the descriptors close when `self` drops.
    pub fn finish<const N: usize>(self) -> Option<[u64; N]> {
        let mut readings = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let _ = g.disable();
            if let Ok(r) = g.read() {
                readings.push(r);
            }
        }
        if readings.is_empty() {
            return None;
        }
        sum_scaled::<N>(&readings)
    }

    pub fn cpus(&self) -> usize {
        self.groups.len()
    }
}

/// The online CPUs from `<sys>/devices/system/cpu/online` (`0-3,8-11`); all CPUs the process
/// may see when the file is unreadable.
pub fn online_cpus(sys_root: &Path) -> Vec<u32> {
    std::fs::read_to_string(sys_root.join("devices/system/cpu/online"))
        .ok()
        .and_then(|s| crate::cpu_list::parse_vec(&s))
        .filter(|cpus| !cpus.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, usize::from);
            (0..u32::try_from(n).unwrap_or(1)).collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::collectors::perf_sys::MAX_EVENTS;

    fn reading(enabled: u64, running: u64, vals: &[u64]) -> GroupReading {
        let mut values = [0; MAX_EVENTS];
        values[..vals.len()].copy_from_slice(vals);
        GroupReading {
            time_enabled: enabled,
            time_running: running,
            values,
            len: vals.len(),
        }
    }

    #[test]
    fn scaling_for_multiplexing() {
        // Counted a quarter of the time: the estimate is four times the count.
        assert_eq!(scale(1_000, 400, 100), Some(4_000));
        assert_eq!(scale(1_000, 400, 400), Some(1_000));
        // Never ran on the CPU: zero, measured.
        assert_eq!(scale(0, 0, 0), Some(0));
        // Enabled but never scheduled on the PMU: unknown.
        assert_eq!(scale(0, 400, 0), None);
        // No overflow on large counts.
        assert_eq!(scale(u64::MAX / 2, 4, 2), Some(u64::MAX - 1));
        assert_eq!(scale(u64::MAX, 4, 1), Some(u64::MAX));
    }

    #[test]
    fn sums_over_cpus() {
        let r = [
            reading(1_000, 500, &[100, 50]), // multiplexed: x2
            reading(1_000, 1_000, &[30, 70]),
            reading(0, 0, &[0, 0]), // idle CPU
        ];
        assert_eq!(sum_scaled::<2>(&r), Some([230, 170]));
        // One CPU unmeasured: the others still count.
        let r = [reading(1_000, 0, &[0, 0]), reading(10, 10, &[5, 6])];
        assert_eq!(sum_scaled::<2>(&r), Some([5, 6]));
        // Active but never measured anywhere: no value.
        assert_eq!(sum_scaled::<2>(&[reading(1_000, 0, &[0, 0])]), None);
        // Idle everywhere: a measured zero.
        assert_eq!(sum_scaled::<2>(&[reading(0, 0, &[0, 0])]), Some([0, 0]));
    }
}
