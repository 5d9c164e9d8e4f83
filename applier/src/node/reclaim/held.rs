//! The value a throttled container's `memory.high` held before the BE throttle, kept on the
//! cgroup itself: a `user.` extended attribute of its directory (cgroup v2 has them since
//! Linux 5.7; systemd keeps its own there). It lives and goes with the cgroup, needs no state
//! file, and an applier that restarts after a crash finds it and puts the value back, so a BE
//! container is never left throttled below what its annotation says. No record, no throttle:
//! where the attribute cannot be written, the container is reclaimed first but not throttled.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::XattrFlags;

use crate::node::shared::limit::parse_limit;
use crate::node::writer::{Key, NodeWriter};

/// The attribute's name; its value is `memory.high` as the file held it (`max` or bytes).
pub const XATTR: &str = "user.koord-qos.memory.high.before";

/// Keeps `prior` before the throttle is written.
pub fn record(dir: &Path, prior: &str) -> io::Result<()> {
    rustix::fs::setxattr(dir, XATTR, prior.as_bytes(), XattrFlags::empty()).map_err(Into::into)
}

/// The value kept on `dir`, if a throttle is recorded there.
pub fn recorded(dir: &Path) -> Option<String> {
    let mut buf = [0u8; 32];
    let n = rustix::fs::getxattr(dir, XATTR, &mut buf[..]).ok()?;
    let v = std::str::from_utf8(buf.get(..n)?).ok()?.trim();
    // Only what `memory.high` can hold is put back.
    parse_limit(v).is_ok().then(|| v.to_owned())
}

/// Drops the record once the value before is back (or its cgroup is gone).
pub fn drop_record(dir: &Path) -> io::Result<()> {
    match rustix::fs::removexattr(dir, XATTR) {
        Ok(()) | Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Puts the kept value back into `memory.high` through the node writer and drops the record;
/// returns the value (`None`: nothing was recorded). The record goes only once the value is
/// back.
pub fn restore(dir: &Path, writer: &NodeWriter) -> io::Result<Option<String>> {
    let Some(prior) = recorded(dir) else {
        return Ok(None);
    };
    writer.put_back(&high_key(dir.into()), &prior)?;
    drop_record(dir)?;
    Ok(Some(prior))
}

/// A container's `memory.high`, as the node writer names it.
pub fn high_key(dir: Arc<Path>) -> Key {
    Key {
        dir,
        file: "memory.high",
    }
}

/// How deep [`restore_tree`] looks below its root: a container's cgroup is at most four levels
/// under `kubepods` (QoS class, pod, container; the systemd driver's slices nest the same way).
const TREE_DEPTH: usize = 6;

/// Puts back every throttle recorded under `root` (the `kubepods` memory tree): what an applier
/// that died while throttling left. Run once at start, before the first pod pass: after it every
/// record on the node is this process's own, so nothing else looks for strays. Returns each
/// directory that held a record with the value put back, or why it could not be.
pub fn restore_tree(root: &Path, writer: &NodeWriter) -> Vec<(PathBuf, io::Result<String>)> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if recorded(&dir).is_some() {
            let r = restore(&dir, writer).map(Option::unwrap_or_default);
            found.push((dir.clone(), r));
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
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_put_back_and_dropped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        if let Err(e) = record(dir, "max") {
            // A filesystem without user xattrs (tmpfs before 6.6): a failure naming why, never
            // a pass.
            panic!("cannot run: no user xattrs on {}: {e}", dir.display());
        }
        assert_eq!(recorded(dir).as_deref(), Some("max"));
        std::fs::write(dir.join("memory.high"), "734003200").expect("throttle");
        let w = NodeWriter::default();
        assert_eq!(restore(dir, &w).expect("restore").as_deref(), Some("max"));
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.high")).expect("read"),
            "max"
        );
        assert_eq!(recorded(dir), None, "the record is dropped");
        assert_eq!(restore(dir, &w).expect("nothing recorded"), None);
        // Not a memory.high value: never written back.
        rustix::fs::setxattr(dir, XATTR, b"rm -rf", XattrFlags::empty()).expect("set");
        assert_eq!(recorded(dir), None);
    }

    #[test]
    fn the_start_sweep_puts_back_every_record_in_the_tree_and_nothing_else() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        let pod = root.join("besteffort/pod1");
        let (a, b, c) = (pod.join("a"), pod.join("b"), root.join("burstable/pod2/c"));
        for d in [&a, &b, &c] {
            std::fs::create_dir_all(d).expect("mkdir");
            std::fs::write(d.join("memory.high"), "104857600").expect("throttle");
        }
        if let Err(e) = record(&a, "max") {
            panic!("cannot run: no user xattrs on {}: {e}", a.display());
        }
        record(&c, "209715200").expect("record");
        // A link to a recorded directory is not followed (it is not the tree's own).
        std::os::unix::fs::symlink(&a, root.join("link")).expect("symlink");
        let mut got: Vec<_> = restore_tree(root, &NodeWriter::default())
            .into_iter()
            .map(|(d, r)| (d, r.expect("restored")))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (a.clone(), "max".to_owned()),
                (c.clone(), "209715200".to_owned())
            ]
        );
        let high = |d: &Path| std::fs::read_to_string(d.join("memory.high")).expect("read");
        assert_eq!(
            (high(&a), high(&b), high(&c)),
            ("max".into(), "104857600".into(), "209715200".into())
        );
        assert_eq!((recorded(&a), recorded(&c)), (None, None));
        assert!(
            restore_tree(root, &NodeWriter::default()).is_empty(),
            "a second sweep finds nothing"
        );
    }
}
