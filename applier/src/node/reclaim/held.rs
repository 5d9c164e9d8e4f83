//! The value a throttled container's `memory.high` held before the BE throttle, kept on the
//! cgroup itself: a `user.` extended attribute of its directory (cgroup v2 has them since
//! Linux 5.7; systemd keeps its own there). It lives and goes with the cgroup, needs no state
//! file, and an applier that restarts after a crash finds it and puts the value back, so a BE
//! container is never left throttled below what its annotation says. No record, no throttle:
//! where the attribute cannot be written, the container is reclaimed first but not throttled.

use std::io;
use std::path::Path;

use rustix::fs::XattrFlags;

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
    (v == "max" || v.parse::<u64>().is_ok()).then(|| v.to_owned())
}

/// Puts the kept value back into `memory.high` and drops the record; returns the value
/// (`None`: nothing was recorded). The record goes only once the value is back.
pub fn restore(dir: &Path) -> io::Result<Option<String>> {
    let Some(prior) = recorded(dir) else {
        return Ok(None);
    };
    std::fs::write(dir.join("memory.high"), &prior)?;
    match rustix::fs::removexattr(dir, XATTR) {
        Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(Some(prior)),
        Err(e) => Err(e.into()),
    }
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
        assert_eq!(restore(dir).expect("restore").as_deref(), Some("max"));
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.high")).expect("read"),
            "max"
        );
        assert_eq!(recorded(dir), None, "the record is dropped");
        assert_eq!(restore(dir).expect("nothing recorded"), None);
        // Not a memory.high value: never written back.
        rustix::fs::setxattr(dir, XATTR, b"rm -rf", XattrFlags::empty()).expect("set");
        assert_eq!(recorded(dir), None);
    }
}
