//! The loop's cgroup IO: what the node offers (detected once), one container's
//! `memory.pressure` and `memory.current` (files kept open, one `pread` each), and a reclaim
//! written in slices that stops at the floor.
//!
//! The kernel fact the floor rests on: a cgroup's own `memory.min` and `memory.low` do not
//! protect it from a `memory.reclaim` written to that same cgroup. Protection is computed
//! relative to the reclaim root, and the root's own protection is left out
//! (`mm/memcontrol.c`, `mem_cgroup_calculate_protection`: `if (memcg == root) return;`);
//! only its children are protected from it. The container's cgroup is both the reclaim root
//! and the cgroup whose memory must stay above its floor, so the floor is the loop's to keep:
//! every slice asks for at most `memory.current - floor` read just before it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupVersion, Controller};

use crate::node::shared::psi;
use crate::node::shared::reclaim_slice::{SLICE_GAP, WRITE_SLICE};

/// What the node lacks for the loop, as the Event says it and the refusal metric counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lack {
    CgroupV1,
    NoMemoryReclaim,
    NoPsi,
}

impl Lack {
    /// The Event's words, after "unsupported on this node: ".
    pub fn text(self) -> &'static str {
        match self {
            Lack::CgroupV1 => "memory.reclaim and memory.pressure (cgroup v1)",
            Lack::NoMemoryReclaim => "memory.reclaim (cgroup v2 has it from Linux 5.19)",
            Lack::NoPsi => {
                "memory.pressure (PSI: a kernel built with CONFIG_PSI, booted without psi=0)"
            }
        }
    }

    /// The `reason` label of the refused-pods counter.
    pub fn reason(self) -> &'static str {
        match self {
            Lack::CgroupV1 => "cgroup-v1",
            Lack::NoMemoryReclaim => "no-memory-reclaim",
            Lack::NoPsi => "no-psi",
        }
    }
}

/// Whether this node can run the loop: cgroup v2, `memory.reclaim` (5.19+) and PSI, as the
/// `kubepods` cgroup shows them (every cgroup below it has what it has).
pub fn node_support(layout: &Layout) -> Result<(), Lack> {
    if layout.version != CgroupVersion::V2 {
        return Err(Lack::CgroupV1);
    }
    let Ok(kubepods) = layout.dir(&layout.kubepods_dir(), Controller::Memory) else {
        return Err(Lack::NoMemoryReclaim);
    };
    if !kubepods.join("memory.reclaim").exists() {
        return Err(Lack::NoMemoryReclaim);
    }
    if !kubepods.join("memory.pressure").exists() {
        return Err(Lack::NoPsi);
    }
    Ok(())
}

/// What a reclaim is written to: the container's cgroup, or a test's fake kernel.
pub trait ReclaimTarget {
    /// `memory.current`, bytes.
    fn current(&mut self) -> io::Result<u64>;
    /// One `memory.reclaim` write of `bytes`.
    fn reclaim(&mut self, bytes: u64) -> io::Result<()>;
}

/// Bounds of one reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slices {
    /// The most one write asks for (why: [`crate::node::shared::reclaim_slice`]);
    /// `memory.current` is re-read before the next one.
    pub slice: u64,
    /// Asleep between two slices.
    pub gap: Duration,
}

impl Default for Slices {
    fn default() -> Self {
        Self {
            slice: WRITE_SLICE,
            gap: SLICE_GAP,
        }
    }
}

/// How a reclaim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Everything asked was written and taken.
    Full,
    /// `memory.current` reached the floor before the ask was done.
    AtFloor,
    /// The kernel answered `EAGAIN`: it could not reclaim that much (nothing cold left).
    Short,
    /// The tick's write budget ran out.
    OutOfTime,
    /// Another error (the cgroup went); logged by the caller.
    Failed,
}

/// What a reclaim took, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaim {
    /// The bytes the kernel took: each full slice, and what `memory.current` fell by over a
    /// short one.
    pub bytes: u64,
    pub end: End,
}

/// Asks for `ask` bytes in slices, re-reading `memory.current` before each one, never for
/// more than what is above `floor`; stops at the floor, at the first `EAGAIN` or error, or at
/// `deadline`. The kernel may take a little more than one write asks (it reclaims in batches
/// of 32 pages), so the floor can be passed by at most that, once: the next read stops it.
pub fn reclaim_above_floor(
    target: &mut impl ReclaimTarget,
    ask: u64,
    floor: u64,
    slices: Slices,
    deadline: Instant,
) -> Reclaim {
    let mut taken = 0u64;
    let done = |bytes, end| Reclaim { bytes, end };
    let Ok(mut current) = target.current() else {
        return done(0, End::Failed);
    };
    let mut left = ask;
    let mut first = true;
    while left > 0 {
        if current <= floor {
            return done(taken, End::AtFloor);
        }
        if !first {
            std::thread::sleep(slices.gap);
        }
        first = false;
        if Instant::now() >= deadline {
            return done(taken, End::OutOfTime);
        }
        let n = left.min(slices.slice.max(1)).min(current - floor);
        match target.reclaim(n) {
            Ok(()) => taken = taken.saturating_add(n),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                let after = target.current().unwrap_or(current);
                return done(
                    taken.saturating_add(current.saturating_sub(after)),
                    End::Short,
                );
            }
            Err(_) => return done(taken, End::Failed),
        }
        left -= n;
        match target.current() {
            Ok(c) => current = c,
            Err(_) => return done(taken, End::Failed),
        }
    }
    done(taken, End::Full)
}

/// One container's cgroup files, opened on first use and kept open.
#[derive(Debug)]
pub struct ContainerFiles {
    dir: Arc<Path>,
    current: Option<File>,
    pressure: Option<File>,
    stat: Option<File>,
    reclaim: Option<File>,
}

impl ContainerFiles {
    /// `dir` comes from the layout (never from annotation text).
    pub fn new(dir: Arc<Path>) -> Self {
        Self {
            dir,
            current: None,
            pressure: None,
            stat: None,
            reclaim: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `some ... total=` of `memory.pressure`, microseconds.
    pub fn pressure_total(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 256];
        let text = pread(&mut self.pressure, &self.dir, "memory.pressure", &mut buf)?;
        psi::parse(text)
            .map(|p| p.some.total_us)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

impl ContainerFiles {
    /// `workingset_refault_anon + workingset_refault_file` of `memory.stat`, pages: the
    /// container's refaults so far (both since 5.9).
    pub fn refaults(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 8192];
        let text = pread(&mut self.stat, &self.dir, "memory.stat", &mut buf)?;
        refaults_of(text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "memory.stat has no workingset_refault_anon/workingset_refault_file",
            )
        })
    }
}

/// The sum of the two refault counters of a `memory.stat` text; `None` when neither is there.
pub fn refaults_of(stat: &str) -> Option<u64> {
    let mut found = None;
    for line in stat.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        if key == "workingset_refault_anon" || key == "workingset_refault_file" {
            let v: u64 = value.trim().parse().ok()?;
            found = Some(found.unwrap_or(0) + v);
        }
    }
    found
}

impl ReclaimTarget for ContainerFiles {
    fn current(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 32];
        let text = pread(&mut self.current, &self.dir, "memory.current", &mut buf)?;
        text.trim()
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn reclaim(&mut self, bytes: u64) -> io::Result<()> {
        let f = match &self.reclaim {
            Some(f) => f,
            None => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(self.dir.join("memory.reclaim"))?;
                self.reclaim.insert(f)
            }
        };
        let wrote = f.write_at(bytes.to_string().as_bytes(), 0).map(drop);
        if wrote
            .as_ref()
            .is_err_and(|e| e.raw_os_error() != Some(rustix::io::Errno::AGAIN.raw_os_error()))
        {
            self.reclaim = None;
        }
        wrote
    }
}

/// Reads `name` of `dir` through the kept handle (opened again after an error: the cgroup of
/// a restarted container is another directory, but a file may also be briefly unreadable).
fn pread<'b>(
    slot: &mut Option<File>,
    dir: &Path,
    name: &str,
    buf: &'b mut [u8],
) -> io::Result<&'b str> {
    let f = match slot {
        Some(f) => f,
        None => slot.insert(File::open(dir.join(name))?),
    };
    let n = match f.read_at(buf, 0) {
        Ok(n) => n,
        Err(e) => {
            *slot = None;
            return Err(e);
        }
    };
    std::str::from_utf8(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// The kernel's batch: what one write may take beyond what it asked.
    const BATCH: u64 = 128 << 10;

    /// A kernel that takes a batch more than asked, or answers EAGAIN once `cold` is gone.
    struct FakeKernel {
        current: u64,
        cold: u64,
        asks: Vec<u64>,
    }

    impl ReclaimTarget for FakeKernel {
        fn current(&mut self) -> io::Result<u64> {
            Ok(self.current)
        }
        fn reclaim(&mut self, bytes: u64) -> io::Result<()> {
            self.asks.push(bytes);
            let take = (bytes + BATCH).min(self.cold);
            self.current -= take;
            self.cold -= take;
            if take < bytes {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::AGAIN.raw_os_error(),
                ));
            }
            Ok(())
        }
    }

    #[test]
    fn refaults_are_the_two_counters_summed() {
        let stat = "anon 1\nfile 2\nworkingset_refault_anon 30\nworkingset_refault_file 12\n\
                    workingset_activate_file 5\n";
        assert_eq!(refaults_of(stat), Some(42));
        assert_eq!(refaults_of("anon 1\nfile 2\n"), None);
        assert_eq!(refaults_of("workingset_refault_file x\n"), None);
    }

    fn quick() -> Slices {
        Slices {
            slice: 2 * MIB,
            gap: Duration::ZERO,
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn slices_stop_at_the_floor_whatever_the_kernel_takes() {
        let mut k = FakeKernel {
            current: 100 * MIB,
            cold: 100 * MIB,
            asks: vec![],
        };
        // 10 MiB asked, 95 MiB floor: the kernel takes a batch more per write.
        let r = reclaim_above_floor(&mut k, 10 * MIB, 95 * MIB, quick(), later());
        assert_eq!(r.end, End::AtFloor);
        assert!(
            k.current >= 95 * MIB - BATCH,
            "{} passed the floor by more than a batch",
            k.current
        );
        assert!(k.asks.iter().all(|a| *a <= 2 * MIB), "slices: {:?}", k.asks);
        // Each ask was at most what was above the floor when it was made.
        let mut cur = 100 * MIB;
        for a in &k.asks {
            assert!(*a <= cur - 95 * MIB);
            cur -= a + BATCH;
        }
        assert_eq!(r.bytes, k.asks.iter().sum::<u64>());
    }

    #[test]
    fn a_full_reclaim_writes_the_ask_in_slices() {
        let mut k = FakeKernel {
            current: 100 * MIB,
            cold: 100 * MIB,
            asks: vec![],
        };
        let r = reclaim_above_floor(&mut k, 5 * MIB, 0, quick(), later());
        assert_eq!(
            r,
            Reclaim {
                bytes: 5 * MIB,
                end: End::Full
            }
        );
        assert_eq!(k.asks, [2 * MIB, 2 * MIB, MIB]);
    }

    #[test]
    fn eagain_counts_what_current_fell_by() {
        let mut k = FakeKernel {
            current: 100 * MIB,
            cold: 3 * MIB,
            asks: vec![],
        };
        let r = reclaim_above_floor(&mut k, 10 * MIB, 0, quick(), later());
        assert_eq!(r.end, End::Short);
        // 2 MiB full (the kernel took a batch more), then what was left of the cold memory.
        assert_eq!(r.bytes, 2 * MIB + (MIB - BATCH));
        assert_eq!(k.current, 97 * MIB);
    }

    #[test]
    fn nothing_is_asked_at_the_floor_or_past_the_deadline() {
        let mut k = FakeKernel {
            current: 50 * MIB,
            cold: 50 * MIB,
            asks: vec![],
        };
        let r = reclaim_above_floor(&mut k, 10 * MIB, 50 * MIB, quick(), later());
        assert_eq!(
            r,
            Reclaim {
                bytes: 0,
                end: End::AtFloor
            }
        );
        let r = reclaim_above_floor(&mut k, 10 * MIB, 0, quick(), Instant::now());
        assert_eq!(
            r,
            Reclaim {
                bytes: 0,
                end: End::OutOfTime
            }
        );
        assert!(k.asks.is_empty());
    }

    #[test]
    fn the_files_are_read_and_written_where_the_layout_says() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir: Arc<Path> = tmp.path().into();
        std::fs::write(
            dir.join("memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        )
        .expect("seed");
        std::fs::write(dir.join("memory.current"), "4096\n").expect("seed");
        std::fs::write(dir.join("memory.reclaim"), "").expect("seed");
        let mut f = ContainerFiles::new(dir.clone());
        assert_eq!(f.pressure_total().expect("psi"), 1234);
        assert_eq!(f.current().expect("current"), 4096);
        f.reclaim(2 * MIB).expect("write");
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.reclaim")).expect("read"),
            "2097152"
        );
        std::fs::write(dir.join("memory.current"), "garbage").expect("seed");
        assert!(f.current().is_err());
    }
}
