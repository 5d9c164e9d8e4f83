//! The only code that touches cgroup files: read, compare, write what differs.

use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use serde::Serialize;

use crate::translate::{Expect, matches};

/// What happened to one knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The file held another value and now holds ours (or would, in a dry run).
    Written,
    /// The file already held the value: nothing written.
    Unchanged,
    /// The cgroup directory exists but the file does not: this kernel lacks the knob.
    Unsupported,
    /// The cgroup directory does not exist (yet, or any more): retried at the next pass.
    Missing,
    /// Not attempted: the pod was refused.
    Refused,
    /// The kernel refused the read or the write.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::Unchanged => "unchanged",
            Outcome::Unsupported => "unsupported",
            Outcome::Missing => "missing",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }
}

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
}

fn io_err(e: rustix::io::Errno) -> std::io::Error {
    e.into()
}

/// Reads an open knob: one short line, so a read shorter than the buffer is the whole value
/// (cgroupfs produces it in one go; a regular file ends the same way).
fn read_fd(fd: &OwnedFd) -> std::io::Result<String> {
    let mut buf = [0u8; 128];
    let mut out = Vec::new();
    loop {
        let n = rustix::io::read(fd, &mut buf).map_err(io_err)?;
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

impl CgroupDir {
    pub fn open(path: Arc<Path>) -> Self {
        let fd = rustix::fs::open(
            &*path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
        Self { path, fd }
    }

    pub fn path(&self) -> &Arc<Path> {
        &self.path
    }

    pub fn exists(&self) -> bool {
        self.fd.is_some()
    }

    /// The trimmed content of `file`; `Ok(None)` when it does not exist.
    pub fn read(&self, file: &str) -> std::io::Result<Option<String>> {
        let Some(dir) = &self.fd else { return Ok(None) };
        match rustix::fs::openat(dir, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => read_fd(&fd).map(Some),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Writes `text` to an existing `file`. Never creates it: a missing knob means an
    /// unsupported kernel, not a file to make. O_TRUNC is what `echo v > file` does and is a
    /// no-op on cgroupfs; it keeps the same code correct on the plain-file test trees.
    pub fn write(&self, file: &str, text: &str) -> std::io::Result<()> {
        let Some(dir) = &self.fd else {
            return Err(ErrorKind::NotFound.into());
        };
        let fd = rustix::fs::openat(
            dir,
            file,
            OFlags::WRONLY | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        let mut bytes = text.as_bytes();
        while !bytes.is_empty() {
            let n = rustix::io::write(&fd, bytes).map_err(io_err)?;
            bytes = &bytes[n..];
        }
        Ok(())
    }
}

/// Reads a file by path, trimmed; `Ok(None)` when it does not exist.
pub fn read_knob(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_owned())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl CgroupWriter {
    pub fn new(dry_run: bool) -> Self {
        Self { dry_run }
    }

    /// Writes `text` to `dir/file` unless the file already holds `expect`.
    pub fn apply(&self, dir: &CgroupDir, file: &str, text: &str, expect: Expect) -> WriteResult {
        let shown = || dir.path().join(file).display().to_string();
        let old = match dir.read(file) {
            Ok(Some(old)) => old,
            Ok(None) if dir.exists() => {
                return WriteResult::of(
                    Outcome::Unsupported,
                    None,
                    Some(format!("{} does not exist", shown())),
                    None,
                );
            }
            Ok(None) => {
                return WriteResult::of(
                    Outcome::Missing,
                    None,
                    Some(format!("{} does not exist", dir.path().display())),
                    None,
                );
            }
            Err(e) => {
                return WriteResult::of(
                    Outcome::Failed,
                    None,
                    Some(format!("read {}: {e}", shown())),
                    e.raw_os_error(),
                );
            }
        };
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
