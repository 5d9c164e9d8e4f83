//! The value a file held before the product's first write, kept on its cgroup: a `user.`
//! extended attribute of the directory, `user.koord-qos.<file>.before` (cgroup v2 has them
//! since Linux 5.7; systemd keeps its own there). It lives and goes with the cgroup and needs
//! no state file: an applier restarted after a crash (or without the feature that wrote)
//! finds it and puts the value back ([`sweep`]). Only the files the writer manages
//! ([`FILES`]) and only values such a file can hold are ever put back, whatever the attribute
//! says.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::XattrFlags;

/// The files whose values the node writer keeps and puts back.
pub const FILES: [&str; 3] = ["memory.high", "memory.swap.max", "cpu.max"];

const PREFIX: &str = "user.koord-qos.";
const SUFFIX: &str = ".before";
/// How deep [`sweep`] looks below its root: a container's cgroup is at most four levels
/// under `kubepods` (QoS class, pod, container; the systemd driver's slices nest the same way).
const TREE_DEPTH: usize = 6;

fn attribute(file: &str) -> String {
    format!("{PREFIX}{file}{SUFFIX}")
}

/// Whether `text` is a value one of [`FILES`] can hold: `max`, bytes, or `cpu.max`'s
/// `<quota|max> <period>`.
fn plausible(text: &str) -> bool {
    let word = |w: &str| w == "max" || (!w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()));
    let mut words = text.split(' ');
    match (words.next(), words.next(), words.next()) {
        (Some(a), None, None) => word(a),
        (Some(a), Some(b), None) => word(a) && b != "max" && word(b),
        _ => false,
    }
}

/// Keeps `found` as the value of `file` before the product wrote it.
pub fn keep(dir: &Path, file: &str, found: &str) -> io::Result<()> {
    rustix::fs::setxattr(
        dir,
        attribute(file),
        found.trim().as_bytes(),
        XattrFlags::empty(),
    )
    .map_err(Into::into)
}

/// The value kept for `file` on `dir`, if one is.
pub fn kept(dir: &Path, file: &str) -> Option<String> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::getxattr(dir, attribute(file), &mut buf[..]).ok()?;
    let v = std::str::from_utf8(buf.get(..n)?).ok()?.trim();
    plausible(v).then(|| v.to_owned())
}

/// Drops the record of `file` (the value is back, or the cgroup is gone).
pub fn forget(dir: &Path, file: &str) -> io::Result<()> {
    match rustix::fs::removexattr(dir, attribute(file)) {
        Ok(()) | Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One record found by [`sweep`].
#[derive(Debug, PartialEq, Eq)]
pub struct Left {
    pub dir: PathBuf,
    pub file: &'static str,
    /// What went back, or why it could not.
    pub put_back: Result<String, String>,
}

/// Puts back every value recorded under `root`: what an applier that died (or ran with a
/// feature since turned off) left. Run once at start, before any feature writes: after it
/// every record on the node is this process's own.
pub fn sweep(root: &Path, dry_run: bool) -> Vec<Left> {
    let mut left = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        for file in FILES {
            let Some(value) = kept(&dir, file) else {
                continue;
            };
            let put_back = if dry_run {
                Ok(value)
            } else {
                std::fs::write(dir.join(file), &value)
                    .and_then(|()| forget(&dir, file))
                    .map(|()| value)
                    .map_err(|e| e.to_string())
            };
            left.push(Left {
                dir: dir.clone(),
                file,
                put_back,
            });
        }
        if depth == TREE_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            // file_type does not follow symlinks: only the tree's own directories.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tmpfs and most local file systems take `user.` attributes; where this one does not,
    /// the test says so and checks nothing else.
    fn xattrs(dir: &Path) -> bool {
        let ok = keep(dir, "memory.high", "max").is_ok();
        let _ = forget(dir, "memory.high");
        if !ok {
            eprintln!("NOT RUN: {} takes no user xattrs", dir.display());
        }
        ok
    }

    #[test]
    fn only_values_the_files_hold_are_plausible() {
        for (text, want) in [
            ("max", true),
            ("268435456", true),
            ("50000 100000", true),
            ("max 100000", true),
            ("", false),
            ("12k", false),
            ("100000 max", false),
            ("1 2 3", false),
            ("rm -rf /", false),
        ] {
            assert_eq!(plausible(text), want, "{text:?}");
        }
    }

    #[test]
    fn a_sweep_puts_back_every_record_below_the_root_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        if !xattrs(root) {
            return;
        }
        let (a, c) = (root.join("a"), root.join("b/c"));
        for d in [&a, &c] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(a.join("memory.high"), "104857600").expect("seed");
        keep(&a, "memory.high", "max").expect("keep");
        std::fs::write(c.join("memory.swap.max"), "4096").expect("seed");
        keep(&c, "memory.swap.max", "0").expect("keep");
        // Never a file outside FILES, never a value no such file holds.
        rustix::fs::setxattr(
            &c,
            "user.koord-qos.cgroup.procs.before",
            b"1",
            XattrFlags::empty(),
        )
        .expect("set");
        keep(&c, "cpu.max", "rm -rf /").expect("keep");
        std::os::unix::fs::symlink(&a, root.join("link")).expect("symlink");
        let mut got = sweep(root, false);
        got.sort_by(|x, y| x.dir.cmp(&y.dir));
        assert_eq!(
            got,
            vec![
                Left {
                    dir: a.clone(),
                    file: "memory.high",
                    put_back: Ok("max".into())
                },
                Left {
                    dir: c.clone(),
                    file: "memory.swap.max",
                    put_back: Ok("0".into())
                },
            ]
        );
        let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(a.join("memory.high")), "max");
        assert_eq!(read(c.join("memory.swap.max")), "0");
        assert!(
            !c.join("cpu.max").exists(),
            "a value cpu.max cannot hold is not written"
        );
        assert!(
            sweep(root, false).is_empty(),
            "a second sweep finds nothing"
        );
    }
}
