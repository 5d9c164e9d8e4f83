//! Read, compare, write what differs: the pod pass's and the ancestors' knobs, through
//! [`super::file`] (the only code that touches cgroup files), with directory handles and knob
//! files kept open between passes.

use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::io::Errno;

use super::file;
use super::outcome::Outcome;
use super::readback::{Expect, matches};

/// The result of one read-compare-write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteResult {
    pub outcome: Outcome,
    /// The value read before writing.
    pub old: Option<String>,
    /// For `Failed`: the error; for `Missing`/`Unsupported`: which file was absent.
    pub error: Option<String>,
    /// The OS error of a failed write, so the caller can retry `EINVAL` after children moved.
    pub errno: Option<i32>,
}

impl WriteResult {
    fn of(
        outcome: Outcome,
        old: Option<String>,
        error: Option<String>,
        errno: Option<i32>,
    ) -> Self {
        Self {
            outcome,
            old,
            error,
            errno,
        }
    }
}

/// Reads and writes cgroup files. `dry_run` reads and compares but never writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct CgroupWriter {
    pub dry_run: bool,
}

/// A cgroup directory opened once (`O_PATH`): each knob is then opened by its short name
/// instead of walking the whole path again, which is most of the cost of a resync.
#[derive(Debug)]
pub struct CgroupDir {
    path: Arc<Path>,
    /// `None` when the directory does not exist (pod not created yet, or gone).
    fd: Option<OwnedFd>,
    /// The directory is on cgroupfs (v1 or v2), where a removed file answers `ENODEV`.
    cgroupfs: bool,
}

/// A knob file kept open between passes and re-read with one `pread` at offset 0 instead of
/// `openat` + `read` + `close`. cgroupfs produces the current value on every read from offset 0.
/// A kept file can go stale when its cgroup is removed (container restart, pod deleted):
/// cgroupfs then answers `ENODEV`; on other filesystems (the test trees) an `fstat` that shows
/// no link left tells. Either way [`KeptKnob::read`] says `Stale` and the caller reopens.
#[derive(Debug)]
pub struct KeptKnob {
    fd: OwnedFd,
    cgroupfs: bool,
}

/// What re-reading a kept knob gave.
#[derive(Debug)]
pub enum KeptRead {
    Value(String),
    /// The file is gone or was replaced: drop it and open the path again.
    Stale,
}

/// How many knob files are kept open, and how many may be (`RLIMIT_NOFILE` minus headroom).
static KEPT: AtomicUsize = AtomicUsize::new(0);
static KEPT_MAX: OnceLock<usize> = OnceLock::new();

/// Fds left for everything but kept knobs under a soft limit of `soft`: 1024, or half of a
/// limit of 2048 or less (the watch, writes, the metrics endpoint's connections).
pub fn reserved_fds(soft: usize) -> usize {
    if soft > 2048 { 1024 } else { soft / 2 }
}

/// Fds the applier may keep open: the limit minus [`reserved_fds`].
fn kept_max() -> usize {
    *KEPT_MAX.get_or_init(|| {
        let soft = crate::fd_limit::soft_limit();
        soft - reserved_fds(soft)
    })
}

impl KeptKnob {
    /// Keeps `self` open if the fd budget allows; otherwise it is closed (read the next pass
    /// the old way).
    pub fn try_keep(self) -> Option<Self> {
        let max = kept_max();
        KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| self)
    }

    /// Re-reads the current value (one `pread`; plus one `fstat` off cgroupfs).
    pub fn read(&self) -> std::io::Result<KeptRead> {
        match file::pread(&self.fd) {
            Ok(v) => {
                if !self.cgroupfs && rustix::fs::fstat(&self.fd)?.st_nlink == 0 {
                    return Ok(KeptRead::Stale);
                }
                Ok(KeptRead::Value(v))
            }
            Err(e)
                if matches!(
                    Errno::from_io_error(&e),
                    Some(Errno::NODEV | Errno::STALE | Errno::NOENT)
                ) =>
            {
                Ok(KeptRead::Stale)
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for KeptKnob {
    fn drop(&mut self) {
        // Only kept knobs were counted; an unkept one never reaches a cache.
        let _ = KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// The number of knob files kept open now (all appliers of the process).
pub fn kept_knobs() -> usize {
    KEPT.load(Ordering::Relaxed)
}

impl CgroupDir {
    /// Opens the directory; one that does not exist, or cannot be opened, is `Missing` for
    /// every knob (an unopenable one is logged with its path and counted).
    pub fn open(path: Arc<Path>) -> Self {
        let fd = file::open_dir_path_or_report(&path);
        let cgroupfs = fd.as_ref().is_some_and(file::is_cgroupfs);
        Self { path, fd, cgroupfs }
    }

    /// Opens `file` to keep it (see [`KeptKnob`]) and reads it once; `Ok(None)` when it does
    /// not exist. The caller decides whether to keep it ([`KeptKnob::try_keep`]).
    pub fn open_knob(&self, name: &str) -> std::io::Result<Option<(KeptKnob, String)>> {
        let Some(dir) = &self.fd else { return Ok(None) };
        let Some(fd) = file::open_at(dir, name)? else {
            return Ok(None);
        };
        let v = file::pread(&fd)?;
        Ok(Some((
            KeptKnob {
                fd,
                cgroupfs: self.cgroupfs,
            },
            v,
        )))
    }

    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    pub fn exists(&self) -> bool {
        self.fd.is_some()
    }

    /// The trimmed content of `file`; `Ok(None)` when it does not exist.
    pub fn read(&self, name: &str) -> std::io::Result<Option<String>> {
        match &self.fd {
            Some(dir) => file::read_at(dir, name),
            None => Ok(None),
        }
    }

    /// Writes `text` to an existing `name`. Never creates it: a missing knob means an
    /// unsupported kernel, not a file to make.
    pub fn write(&self, name: &str, text: &str) -> std::io::Result<()> {
        match &self.fd {
            Some(dir) => file::write_at(dir, name, text),
            None => Err(ErrorKind::NotFound.into()),
        }
    }
}

impl CgroupWriter {
    pub fn new(dry_run: bool) -> Self {
        Self { dry_run }
    }

    /// Writes `text` to `dir/file` unless the file already holds `expect`.
    pub fn apply(&self, dir: &CgroupDir, file: &str, text: &str, expect: Expect) -> WriteResult {
        match Self::read_result(dir, file, dir.read(file)) {
            Ok(old) => self.compare_write(dir, file, text, expect, old),
            Err(r) => r,
        }
    }

    /// Whether `dir` is a cgroup v2 directory whose `cgroup.controllers` lacks the controller
    /// of `file` (`cpu.weight` -> `cpu`). False where there is no such list (cgroup v1, test
    /// trees) or the file has no controller prefix.
    fn controller_not_enabled_in(dir: &CgroupDir, file: &str) -> bool {
        let Some((controller, _)) = file.split_once('.') else {
            return false;
        };
        if controller == "cgroup" {
            return false;
        }
        match dir.read("cgroup.controllers") {
            Ok(Some(list)) => !list.split_whitespace().any(|c| c == controller),
            _ => false,
        }
    }

    /// The outcome of reading `dir/file`: the value, or why there is none (`Unsupported`,
    /// `Missing`, `Failed`).
    pub fn read_result(
        dir: &CgroupDir,
        file: &str,
        read: std::io::Result<Option<String>>,
    ) -> Result<String, WriteResult> {
        let shown = || dir.path().join(file).display().to_string();
        Err(match read {
            Ok(Some(old)) => return Ok(old),
            // cgroup v2: the file's controller is not enabled here yet (systemd enables a
            // slice's controllers when a unit below asks for them): not the kernel's lack.
            Ok(None) if dir.exists() && Self::controller_not_enabled_in(dir, file) => {
                WriteResult::of(
                    Outcome::Missing,
                    None,
                    Some(format!(
                        "{} does not exist: its controller is not enabled in {} yet",
                        shown(),
                        dir.path().display()
                    )),
                    None,
                )
            }
            Ok(None) if dir.exists() => WriteResult::of(
                Outcome::Unsupported,
                None,
                Some(format!("{} does not exist", shown())),
                None,
            ),
            Ok(None) => WriteResult::of(
                Outcome::Missing,
                None,
                Some(format!("{} does not exist", dir.path().display())),
                None,
            ),
            Err(e) => WriteResult::of(
                Outcome::Failed,
                None,
                Some(format!("read {}: {e}", shown())),
                e.raw_os_error(),
            ),
        })
    }

    /// [`Self::compare_write`] for a value systemd was just given (`held`, see
    /// `crate::cgroup::systemd`): the file is read back first, and written only if it still differs
    /// (it counts as written either way: the value changed).
    pub fn compare_write_held(
        &self,
        dir: &CgroupDir,
        file: &str,
        text: &str,
        expect: Expect,
        old: String,
        held: bool,
    ) -> WriteResult {
        if held
            && !matches(expect, &old)
            && matches!(dir.read(file), Ok(Some(now)) if matches(expect, &now))
        {
            return WriteResult::of(Outcome::Written, Some(old), None, None);
        }
        self.compare_write(dir, file, text, expect, old)
    }

    /// Compares the value read (`old`) with `expect` and writes `text` when they differ.
    pub fn compare_write(
        &self,
        dir: &CgroupDir,
        file: &str,
        text: &str,
        expect: Expect,
        old: String,
    ) -> WriteResult {
        let shown = || dir.path().join(file).display().to_string();
        if matches(expect, &old) {
            return WriteResult::of(Outcome::Unchanged, Some(old), None, None);
        }
        if self.dry_run {
            return WriteResult::of(Outcome::Written, Some(old), None, None);
        }
        match dir.write(file, text) {
            Ok(()) => WriteResult::of(Outcome::Written, Some(old), None, None),
            Err(e) if e.kind() == ErrorKind::NotFound => WriteResult::of(
                Outcome::Missing,
                Some(old),
                Some(format!("{} vanished", shown())),
                None,
            ),
            Err(e) => WriteResult::of(
                Outcome::Failed,
                Some(old),
                Some(format!("write {text:?} to {}: {e}", shown())),
                e.raw_os_error(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &Path) -> CgroupDir {
        CgroupDir::open(Arc::from(p))
    }

    #[test]
    fn read_compare_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("memory.high"), "max\n").expect("seed");
        let w = CgroupWriter::new(false);
        let cg = open(d);
        let r = w.apply(&cg, "memory.high", "83886080", Expect::Bytes(83_886_080));
        assert_eq!(
            (r.outcome, r.old.as_deref()),
            (Outcome::Written, Some("max"))
        );
        assert_eq!(
            std::fs::read_to_string(d.join("memory.high")).expect("read"),
            "83886080"
        );
        let r = w.apply(&cg, "memory.high", "83886080", Expect::Bytes(83_886_080));
        assert_eq!(r.outcome, Outcome::Unchanged);
        // A shorter value must not leave the tail of the longer one behind.
        let r = w.apply(&cg, "memory.high", "max", Expect::Unlimited);
        assert_eq!(r.outcome, Outcome::Written);
        assert_eq!(
            std::fs::read_to_string(d.join("memory.high")).expect("read"),
            "max"
        );
    }

    #[test]
    fn reads_values_longer_than_the_buffer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long = "1".repeat(300);
        std::fs::write(dir.path().join("f"), format!("{long}\n")).expect("seed");
        assert_eq!(open(dir.path()).read("f").expect("read"), Some(long));
        assert_eq!(open(dir.path()).read("none").expect("read"), None);
    }

    #[test]
    fn kept_knob_rereads_and_detects_a_replaced_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join("cg");
        std::fs::create_dir(&d).expect("mkdir");
        std::fs::write(d.join("cpu.weight"), "100\n").expect("seed");
        let (k, v) = open(&d)
            .open_knob("cpu.weight")
            .expect("open")
            .expect("exists");
        assert_eq!(v, "100");
        // Written behind our back (same file): the kept fd sees the new value.
        std::fs::write(d.join("cpu.weight"), "7\n").expect("drift");
        assert!(matches!(k.read(), Ok(KeptRead::Value(v)) if v == "7"));
        // The directory replaced (container restarted): stale, never the old value.
        std::fs::remove_dir_all(&d).expect("rm");
        std::fs::create_dir(&d).expect("mkdir again");
        std::fs::write(d.join("cpu.weight"), "100\n").expect("seed again");
        assert!(matches!(k.read(), Ok(KeptRead::Stale)));
        assert_eq!(
            open(&d).open_knob("none").expect("open").map(|(_, v)| v),
            None
        );
    }

    #[test]
    fn a_knob_whose_controller_is_not_enabled_yet_is_missing_not_unsupported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let w = CgroupWriter::new(false);
        // systemd has not enabled cpu for this slice yet: retried, not the kernel's lack.
        std::fs::write(d.join("cgroup.controllers"), "memory pids\n").expect("seed");
        let r = w.apply(&open(d), "cpu.weight", "4", Expect::Int(4));
        assert_eq!(r.outcome, Outcome::Missing, "{r:?}");
        assert!(
            r.error.as_deref().unwrap_or("").contains("not enabled"),
            "{r:?}"
        );
        // The controller is there and the file is not: this kernel lacks the knob.
        std::fs::write(d.join("cgroup.controllers"), "cpu memory pids\n").expect("seed");
        let r = w.apply(&open(d), "cpu.idle", "1", Expect::Int(1));
        assert_eq!(r.outcome, Outcome::Unsupported, "{r:?}");
        // No list (cgroup v1, test trees): as before.
        std::fs::remove_file(d.join("cgroup.controllers")).expect("rm");
        let r = w.apply(&open(d), "cpu.weight", "4", Expect::Int(4));
        assert_eq!(r.outcome, Outcome::Unsupported, "{r:?}");
    }

    #[test]
    fn absent_file_or_dir_and_dry_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let w = CgroupWriter::new(false);
        assert_eq!(
            w.apply(&open(d), "memory.wmark_ratio", "95", Expect::Int(95))
                .outcome,
            Outcome::Unsupported
        );
        assert!(
            !d.join("memory.wmark_ratio").exists(),
            "a missing knob must never be created"
        );
        assert_eq!(
            w.apply(&open(&d.join("gone")), "memory.min", "0", Expect::Bytes(0))
                .outcome,
            Outcome::Missing
        );
        std::fs::write(d.join("memory.min"), "0").expect("seed");
        let r = CgroupWriter::new(true).apply(&open(d), "memory.min", "4096", Expect::Bytes(4096));
        assert_eq!(r.outcome, Outcome::Written);
        assert_eq!(
            std::fs::read_to_string(d.join("memory.min")).expect("read"),
            "0",
            "dry run writes nothing"
        );
    }
}
