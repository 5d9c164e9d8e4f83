//! The only code that opens, reads, lists or writes cgroup files: by path, or by name below a
//! directory handle (the pod pass, the collectors). [`super::writer`] builds read-compare-write
//! and kept knobs on top of it.
//!
//! A file or directory that does not exist reads as `Ok(None)`: on cgroupfs that is the kernel
//! saying "no such knob on this kernel" or "no such cgroup (yet, or any more)". Every other
//! error names the path. The `*_or_report` functions, for callers that go on without the
//! value, log such an error (once per path until it reads again) and count it in
//! `koord_applier_cgroup_read_errors_total`: an unreadable file never passes for an absent one.

use std::collections::BTreeSet;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rustix::fs::{Mode, OFlags};

/// Read errors reported ([`report`]) since the start.
static READ_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Paths whose error was logged and that have not read since: logged once, not every pass.
static REPORTED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The number of cgroup read errors reported so far (the process's, all passes).
pub fn read_errors() -> u64 {
    READ_ERRORS.load(Ordering::Relaxed)
}

/// `err` with `op` and the path in its message; the kind is kept (`NotFound`, ...).
fn at(op: &str, path: &Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{op} {}: {err}", path.display()))
}

/// The trimmed content of `path`; `Ok(None)` when it or its directory does not exist.
pub fn read(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(trimmed(&bytes))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(at("read", path, e)),
    }
}

/// [`read`] for a file that must exist: absent is a `NotFound` error naming the path.
pub fn read_existing(path: &Path) -> io::Result<String> {
    read(path)?.ok_or_else(|| at("read", path, rustix::io::Errno::NOENT.into()))
}

/// [`read`] for a caller that goes on without the value: `None` when absent, and when
/// unreadable, which is logged with the path and counted.
pub fn read_or_report(path: &Path) -> Option<String> {
    or_report(path, read(path)).flatten()
}

/// The cgroup directories directly below `dir`, sorted; none when `dir` does not exist.
pub fn subdirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(at("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| at("list", dir, e))?;
        // A child removed while listed has no type any more: it is not a cgroup now.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// [`subdirs`] for a caller that goes on without the list: an error is logged and counted.
pub fn subdirs_or_report(dir: &Path) -> Vec<PathBuf> {
    or_report(dir, subdirs(dir)).unwrap_or_default()
}

/// The value of an operation on `path`; an error is reported ([`report`]) and gives `None`.
pub fn or_report<T>(path: &Path, result: io::Result<T>) -> Option<T> {
    match result {
        Ok(v) => {
            let mut reported = REPORTED.lock().unwrap_or_else(PoisonError::into_inner);
            if !reported.is_empty() {
                reported.remove(path);
            }
            Some(v)
        }
        Err(e) => {
            report(path, &e);
            None
        }
    }
}

/// Counts a read error on `path` and logs it, once per path until the path reads again.
pub fn report(path: &Path, err: &io::Error) {
    READ_ERRORS.fetch_add(1, Ordering::Relaxed);
    let mut reported = REPORTED.lock().unwrap_or_else(PoisonError::into_inner);
    if reported.insert(path.to_owned()) {
        tracing::warn!(path = %path.display(), error = %err, "cgroup file unreadable: going on without it (said once until it reads again)");
    }
}

/// Writes `text` to an existing file by path, never creating it (a missing file is
/// `NotFound`). `O_TRUNC` is what `echo v > file` does and a no-op on cgroupfs; it keeps the
/// same code correct on the plain-file test trees. The error keeps its OS code (a caller
/// retries `EINVAL` after moving children).
pub fn write(path: &Path, text: &str) -> io::Result<()> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    write_all(&fd, text)
}

/// A directory handle for `*_at` reads and writes: `O_PATH`, enough to open files below it.
/// `Ok(None)` when the directory does not exist.
pub fn open_dir_path(dir: &Path) -> io::Result<Option<OwnedFd>> {
    match rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(at("open", dir, e.into())),
    }
}

/// [`open_dir_path`] for a caller that treats an unopenable directory as absent: the error
/// is logged with the path and counted.
pub fn open_dir_path_or_report(dir: &Path) -> Option<OwnedFd> {
    or_report(dir, open_dir_path(dir)).flatten()
}

/// A directory handle that can be read as well (`O_RDONLY`): what perf's cgroup mode takes.
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Whether `fd` is on cgroupfs (v1 or v2), where a removed file answers `ENODEV`.
pub fn is_cgroupfs(fd: impl AsFd) -> bool {
    /// `statfs(2)` magics of cgroup v1 and v2 mounts (`linux/magic.h`).
    const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
    const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
    rustix::fs::fstatfs(fd).is_ok_and(|st| {
        // f_type's integer width differs between architectures; magics fit in 32 bits.
        #[allow(clippy::unnecessary_cast)]
        let magic = st.f_type as u64;
        magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC
    })
}

/// Opens `file` below `dir` for reading; `Ok(None)` when it does not exist.
pub fn open_at(dir: impl AsFd, file: &str) -> io::Result<Option<OwnedFd>> {
    match rustix::fs::openat(dir, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The trimmed content of `file` below `dir`; `Ok(None)` when it does not exist.
pub fn read_at(dir: impl AsFd, file: &str) -> io::Result<Option<String>> {
    match open_at(dir, file)? {
        Some(fd) => pread(&fd).map(Some),
        None => Ok(None),
    }
}

/// Reads `file` below `dir` into `buf` (no allocation: the pressure files are under 200
/// bytes); the length read, `Ok(None)` when the file does not exist. A file longer than `buf`
/// fills it.
pub fn read_at_into(dir: impl AsFd, file: &str, buf: &mut [u8]) -> io::Result<Option<usize>> {
    let Some(fd) = open_at(dir, file)? else {
        return Ok(None);
    };
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(len))
}

/// Writes `text` to an existing `file` below `dir` (never creating it), as [`write`].
pub fn write_at(dir: impl AsFd, file: &str, text: &str) -> io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        file,
        OFlags::WRONLY | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    write_all(&fd, text)
}

fn write_all(fd: &OwnedFd, text: &str) -> io::Result<()> {
    let mut bytes = text.as_bytes();
    while !bytes.is_empty() {
        let n = rustix::io::write(fd, bytes)?;
        bytes = &bytes[n..];
    }
    Ok(())
}

/// The trimmed content of an open file, read with `pread` from offset 0: the same fd reads
/// the current value again (cgroupfs produces it on every read from 0). One short line, so a
/// read shorter than the buffer is the whole value.
pub fn pread(fd: &OwnedFd) -> io::Result<String> {
    let mut buf = [0u8; 128];
    let n = rustix::io::pread(fd, &mut buf, 0)?;
    if n < buf.len() {
        return Ok(trimmed(&buf[..n]));
    }
    let mut out = buf.to_vec();
    loop {
        let n = rustix::io::pread(fd, &mut buf, out.len() as u64)?;
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return Ok(trimmed(&out));
        }
    }
}

fn trimmed(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.trim().to_owned(),
        Err(_) => String::from_utf8_lossy(b).trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each kind of path reads as: the value, absent, or an error naming the path.
    #[test]
    fn read_table() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        std::fs::write(d.join("cpu.max"), "max 100000\n").expect("seed");
        std::fs::write(d.join("long"), format!("{}\n", "1".repeat(300))).expect("seed");
        std::fs::create_dir(d.join("a.dir")).expect("mkdir");
        std::fs::write(d.join("plain"), "x").expect("seed");
        type Case = (&'static str, Result<Option<String>, ErrorKind>);
        let cases: Vec<Case> = vec![
            ("cpu.max", Ok(Some("max 100000".into()))),
            ("long", Ok(Some("1".repeat(300)))),
            // An unsupported knob, a cgroup not made yet: absent, as the kernel means it.
            ("memory.wmark_ratio", Ok(None)),
            ("gone/cpuset.cpus", Ok(None)),
            // Anything else is an error, never "absent".
            ("a.dir", Err(ErrorKind::IsADirectory)),
            ("plain/cpuset.cpus", Err(ErrorKind::NotADirectory)),
        ];
        for (name, want) in cases {
            let path = d.join(name);
            match (read(&path), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), Err(kind)) => {
                    assert_eq!(e.kind(), kind, "{name}");
                    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
                }
                (got, want) => panic!("{name}: {got:?}, want {want:?}"),
            }
            let by_fd = open_dir_path(d).expect("open").expect("exists");
            if !name.contains('/') {
                match (read_at(&by_fd, name), read(&path)) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}: by fd and by path"),
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("{name}: by fd {a:?}, by path {b:?}"),
                }
            }
        }
        assert_eq!(
            read_existing(&d.join("memory.wmark_ratio"))
                .expect_err("absent")
                .kind(),
            ErrorKind::NotFound
        );
    }

    /// Errors are counted every time and logged once per path until the path reads again.
    #[test]
    fn errors_are_reported_never_absent() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        std::fs::create_dir(d.join("cpuset.cpus")).expect("a directory where the file is");
        let before = read_errors();
        assert_eq!(read_or_report(&d.join("cpuset.cpus")), None);
        assert_eq!(read_or_report(&d.join("cpuset.cpus")), None);
        assert!(read_errors() >= before + 2, "each error counted");
        assert!(
            REPORTED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&d.join("cpuset.cpus"))
        );
        // Absent is not an error.
        let counted = read_errors();
        assert_eq!(read_or_report(&d.join("cpu.max")), None);
        assert_eq!(subdirs_or_report(&d.join("gone")), Vec::<PathBuf>::new());
        // Fixed: reads again, and a later error would be logged again.
        std::fs::remove_dir(d.join("cpuset.cpus")).expect("rmdir");
        std::fs::write(d.join("cpuset.cpus"), "0-3\n").expect("seed");
        assert_eq!(
            read_or_report(&d.join("cpuset.cpus")).as_deref(),
            Some("0-3")
        );
        assert!(
            !REPORTED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&d.join("cpuset.cpus"))
        );
        // A file where a directory is listed: an error, counted.
        assert_eq!(
            subdirs_or_report(&d.join("cpuset.cpus")),
            Vec::<PathBuf>::new()
        );
        assert!(read_errors() > counted);
    }

    #[test]
    fn subdirs_lists_directories_only_sorted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        for name in ["pod-b", "pod-a"] {
            std::fs::create_dir(d.join(name)).expect("mkdir");
        }
        std::fs::write(d.join("cpu.max"), "max").expect("seed");
        assert_eq!(
            subdirs(d).expect("list"),
            vec![d.join("pod-a"), d.join("pod-b")]
        );
        assert_eq!(
            subdirs(&d.join("gone")).expect("absent"),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn writes_never_create_and_truncate() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        assert_eq!(
            write(&d.join("memory.min"), "0")
                .expect_err("absent")
                .kind(),
            ErrorKind::NotFound
        );
        assert!(!d.join("memory.min").exists(), "never created");
        std::fs::write(d.join("memory.high"), "83886080\n").expect("seed");
        write(&d.join("memory.high"), "max").expect("write");
        assert_eq!(
            read(&d.join("memory.high")).expect("read").as_deref(),
            Some("max")
        );
        let fd = open_dir_path(d).expect("open").expect("exists");
        write_at(&fd, "memory.high", "4096").expect("write at");
        assert_eq!(
            read_at(&fd, "memory.high").expect("read").as_deref(),
            Some("4096")
        );
        assert!(open_dir_path(&d.join("gone")).expect("absent").is_none());
        let mut buf = [0u8; 2];
        assert_eq!(
            read_at_into(&fd, "memory.high", &mut buf).expect("read"),
            Some(2)
        );
        assert_eq!(&buf, b"40");
        assert_eq!(read_at_into(&fd, "none", &mut buf).expect("absent"), None);
    }
}
