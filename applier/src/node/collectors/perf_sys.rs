//! `perf_event_open(2)` counter groups behind a safe API.
//!
//! The workspace denies `unsafe_code`; this module is the one exception in the collectors,
//! because no safe wrapper of `perf_event_open` exists: glibc has none and rustix does not bind
//! it, so it goes through `libc::syscall` (this module's only use of `libc`). Its ioctls take
//! rustix's generic `ioctl`, which is `unsafe` because the kernel cannot check an argument's
//! type; reads are rustix's safe `read`. The high-level crates either
//! cannot build a cgroup-scoped per-CPU group (`perf-event`) or pull in bindgen output for
//! three calls (`perf-event2`). Every `unsafe` block is a single syscall whose arguments are
//! checked here; file descriptors leave this module only as [`OwnedFd`], so they close on drop.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_ulong};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rustix::io::Errno;
use rustix::ioctl::{IntegerSetter, Opcode, opcode};

/// `perf_event_attr.type`.
const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
/// `perf_event_attr.config` for the hardware and software types used here.
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `perf_event_attr.read_format` bits.
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
/// Bits of the `perf_event_attr` bit-field word (`disabled` is bit 0, `exclude_kernel` bit 5,
/// `exclude_hv` bit 6).
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
/// `perf_event_open` flags.
const PERF_FLAG_PID_CGROUP: c_ulong = 1 << 2;
const PERF_FLAG_FD_CLOEXEC: c_ulong = 1 << 3;
/// `_IO('$', n)` ioctls and their argument.
const PERF_EVENT_IOC_ENABLE: Opcode = opcode::none(b'$', 0);
const PERF_EVENT_IOC_DISABLE: Opcode = opcode::none(b'$', 1);
const PERF_EVENT_IOC_RESET: Opcode = opcode::none(b'$', 3);
const PERF_IOC_FLAG_GROUP: usize = 1;

/// The most events one group holds (a CPI group has two).
pub const MAX_EVENTS: usize = 4;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes). The kernel accepts any
/// published size and treats the fields it does not know as zero.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const ATTR_SIZE: u32 = 112;
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == ATTR_SIZE as usize);

/// A countable event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Hardware CPU cycles (needs a PMU).
    Cycles,
    /// Hardware retired instructions (needs a PMU).
    Instructions,
    /// Software: nanoseconds the monitored tasks ran (works without a PMU).
    TaskClock,
    /// Software: nanoseconds of CPU clock (works without a PMU).
    CpuClock,
}

impl Event {
    fn type_config(self) -> (u32, u64) {
        match self {
            Event::Cycles => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
            Event::Instructions => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
            Event::TaskClock => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
            Event::CpuClock => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK),
        }
    }
}

/// Why a counter could not be opened, classified the way the collector acts on it.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// ENOENT, ENODEV, ENXIO, EOPNOTSUPP: the event does not exist here (no PMU, e.g. a VM
    /// without virtual counters).
    #[error("event not supported by this machine: {0}")]
    Unsupported(#[source] io::Error),
    /// EACCES, EPERM: needs CAP_PERFMON/CAP_SYS_ADMIN or a lower `perf_event_paranoid`.
    #[error("not permitted (needs CAP_PERFMON or perf_event_paranoid <= 0): {0}")]
    Permission(#[source] io::Error),
    /// EMFILE, ENFILE: out of file descriptors.
    #[error("out of file descriptors: {0}")]
    FdLimit(#[source] io::Error),
    #[error("{0}")]
    Other(#[source] io::Error),
    #[error("a group holds 1..={MAX_EVENTS} events, got {0}")]
    GroupSize(usize),
}

impl PerfError {
    fn classify(e: io::Error) -> Self {
        match Errno::from_io_error(&e) {
            Some(Errno::NOENT | Errno::NODEV | Errno::NXIO | Errno::OPNOTSUPP) => {
                PerfError::Unsupported(e)
            }
            Some(Errno::ACCESS | Errno::PERM) => PerfError::Permission(e),
            Some(Errno::MFILE | Errno::NFILE) => PerfError::FdLimit(e),
            _ => PerfError::Other(e),
        }
    }
}

/// One group read: the leader's enabled/running times and each event's raw count, in the
/// order the events were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupReading {
    pub time_enabled: u64,
    pub time_running: u64,
    pub values: [u64; MAX_EVENTS],
    pub len: usize,
}

impl GroupReading {
    pub fn values(&self) -> &[u64] {
        &self.values[..self.len]
    }
}

/// A leader and its members, counting together (scheduled on the PMU as one unit).
#[derive(Debug)]
pub struct CounterGroup {
    leader: OwnedFd,
    _members: Vec<OwnedFd>,
    len: usize,
}

fn attr_for(event: Event, leader: bool, exclude_kernel: bool) -> PerfEventAttr {
    let (type_, config) = event.type_config();
    let mut flags = ATTR_EXCLUDE_HV;
    if leader {
        // Members follow the leader: they count whenever it does.
        flags |= ATTR_DISABLED;
    }
    if exclude_kernel {
        flags |= ATTR_EXCLUDE_KERNEL;
    }
    PerfEventAttr {
        type_,
        size: ATTR_SIZE,
        config,
        read_format: PERF_FORMAT_GROUP
            | PERF_FORMAT_TOTAL_TIME_ENABLED
            | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags,
        ..PerfEventAttr::default()
    }
}

fn open_one(
    attr: &PerfEventAttr,
    pid: c_int,
    cpu: c_int,
    group: Option<RawFd>,
    flags: c_ulong,
) -> Result<OwnedFd, PerfError> {
    // SAFETY: `attr` is a live, fully initialised `perf_event_attr` of the size it declares
    // (checked at compile time); the kernel only reads it. `pid`, `cpu`, `group` and `flags`
    // are plain integers the kernel validates. No memory is handed over.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            std::ptr::from_ref(attr),
            pid,
            cpu,
            group.unwrap_or(-1),
            flags,
        )
    };
    if ret < 0 {
        return Err(PerfError::classify(io::Error::last_os_error()));
    }
    let fd = RawFd::try_from(ret).map_err(|_| PerfError::Other(io::Error::other("fd range")))?;
    // SAFETY: the syscall succeeded, so `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One of the group ioctls (`PERF_EVENT_IOC_ENABLE`, `_DISABLE`, `_RESET`) on the leader.
fn ioctl_group<const REQUEST: Opcode>(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: the three perf ioctls used here are `_IO` requests whose argument is an integer
    // (PERF_IOC_FLAG_GROUP), never a pointer; `fd` is an open perf event descriptor owned by
    // the group.
    unsafe { rustix::ioctl::ioctl(fd, IntegerSetter::<REQUEST>::new_usize(PERF_IOC_FLAG_GROUP)) }?;
    Ok(())
}

impl CounterGroup {
    fn open(
        pid: c_int,
        cpu: c_int,
        events: &[Event],
        flags: c_ulong,
        exclude_kernel: bool,
    ) -> Result<Self, PerfError> {
        if events.is_empty() || events.len() > MAX_EVENTS {
            return Err(PerfError::GroupSize(events.len()));
        }
        let leader = open_one(
            &attr_for(events[0], true, exclude_kernel),
            pid,
            cpu,
            None,
            flags,
        )?;
        let mut members = Vec::with_capacity(events.len() - 1);
        for &e in &events[1..] {
            members.push(open_one(
                &attr_for(e, false, exclude_kernel),
                pid,
                cpu,
                Some(leader.as_raw_fd()),
                flags,
            )?);
        }
        Ok(Self {
            leader,
            _members: members,
            len: events.len(),
        })
    }

    /// Counts `events` for the tasks of one cgroup on one CPU (cgroup mode needs a concrete
    /// CPU). `cgroup_dir` is an open (not `O_PATH`) descriptor of the cgroup's directory in
    /// the perf_event hierarchy (the v2 directory, or `perf_event/...` on v1). Starts disabled.
    pub fn open_cgroup(
        cgroup_dir: BorrowedFd<'_>,
        cpu: u32,
        events: &[Event],
    ) -> Result<Self, PerfError> {
        let cpu = c_int::try_from(cpu).map_err(|_| PerfError::Other(Errno::INVAL.into()))?;
        Self::open(
            cgroup_dir.as_raw_fd(),
            cpu,
            events,
            PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC,
            false,
        )
    }

    /// Counts `events` for the calling thread on any CPU, user space only: needs no privilege,
    /// so it tells "no such event" apart from "not allowed". Starts disabled.
    pub fn open_self(events: &[Event]) -> Result<Self, PerfError> {
        Self::open(0, -1, events, PERF_FLAG_FD_CLOEXEC, true)
    }

    /// Zeroes and starts every counter of the group.
    pub fn reset_and_enable(&self) -> io::Result<()> {
        ioctl_group::<PERF_EVENT_IOC_RESET>(&self.leader)?;
        ioctl_group::<PERF_EVENT_IOC_ENABLE>(&self.leader)
    }

    /// Stops every counter of the group (the counts stay readable).
    pub fn disable(&self) -> io::Result<()> {
        ioctl_group::<PERF_EVENT_IOC_DISABLE>(&self.leader)
    }

    /// Reads `{nr, time_enabled, time_running, value[nr]}` from the leader.
    pub fn read(&self) -> io::Result<GroupReading> {
        const WORD: usize = std::mem::size_of::<u64>();
        let mut bytes = [0u8; (3 + MAX_EVENTS) * WORD];
        let want = (3 + self.len) * WORD;
        let n = rustix::io::read(&self.leader, &mut bytes[..want])?;
        let mut buf = [0u64; 3 + MAX_EVENTS];
        for (word, chunk) in buf.iter_mut().zip(bytes.chunks_exact(WORD)) {
            let mut w = [0u8; WORD];
            w.copy_from_slice(chunk);
            *word = u64::from_ne_bytes(w);
        }
        parse_group_read(&buf, n, self.len)
    }
}

/// Checks the shape of a group read buffer and copies it out.
fn parse_group_read(buf: &[u64], bytes: usize, len: usize) -> io::Result<GroupReading> {
    let want = (3 + len) * std::mem::size_of::<u64>();
    let nr = usize::try_from(buf[0]).unwrap_or(usize::MAX);
    if bytes != want || nr != len {
        return Err(io::Error::other(format!(
            "perf group read: {bytes} bytes with nr={nr}, expected {want} bytes with nr={len}"
        )));
    }
    let mut r = GroupReading {
        time_enabled: buf[1],
        time_running: buf[2],
        len,
        ..GroupReading::default()
    };
    r.values[..len].copy_from_slice(&buf[3..3 + len]);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_read_shape_is_checked() {
        let buf = [2, 1000, 500, 7, 9, 0, 0];
        let r = parse_group_read(&buf, 40, 2).expect("valid");
        assert_eq!((r.time_enabled, r.time_running), (1000, 500));
        assert_eq!(r.values(), &[7, 9]);
        assert!(parse_group_read(&buf, 32, 2).is_err(), "short read");
        assert!(parse_group_read(&buf, 40, 3).is_err(), "nr mismatch");
    }

    #[test]
    fn errno_classes() {
        let c = |n: Errno| PerfError::classify(n.into());
        assert!(matches!(c(Errno::NOENT), PerfError::Unsupported(_)));
        assert!(matches!(c(Errno::OPNOTSUPP), PerfError::Unsupported(_)));
        assert!(matches!(c(Errno::NODEV), PerfError::Unsupported(_)));
        assert!(matches!(c(Errno::ACCESS), PerfError::Permission(_)));
        assert!(matches!(c(Errno::MFILE), PerfError::FdLimit(_)));
        assert!(matches!(c(Errno::INVAL), PerfError::Other(_)));
    }

    #[test]
    #[ignore = "needs perf_event_open with software events (perf_event_paranoid <= 2 or root)"]
    fn task_clock_counts_this_thread() {
        // Software events exist on every Linux kernel with perf support.
        let g = CounterGroup::open_self(&[Event::TaskClock, Event::CpuClock])
            .unwrap_or_else(|e| panic!("needs perf_event_open with software events: {e}"));
        // The thread's own on-CPU time from the scheduler, so a loaded machine (fewer CPU
        // cycles for the same wall time) cannot make the comparison flaky.
        let on_cpu_ns = || -> u64 {
            std::fs::read_to_string("/proc/thread-self/schedstat")
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let before = on_cpu_ns();
        g.reset_and_enable().expect("enable");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        g.disable().expect("disable");
        let spent = on_cpu_ns().saturating_sub(before);
        let r = g.read().expect("read");
        assert_eq!(r.len, 2);
        let task_clock = r.values()[0];
        assert!(task_clock > 0, "task-clock counted nothing");
        if spent > 0 {
            // task-clock (ns) and the scheduler's on-CPU time measure the same thing.
            assert!(
                task_clock * 2 >= spent && task_clock <= spent * 2,
                "task-clock {task_clock} ns vs {spent} ns on CPU"
            );
        }
        assert!(r.time_enabled >= r.time_running && r.time_running > 0);
    }
}
