//! Which cgroup hierarchy and which kubelet driver the node uses.

use std::path::Path;

use super::{CgroupDriver, CgroupVersion};

/// `statfs(2)` magic of a cgroup v2 mount (`CGROUP2_SUPER_MAGIC` in `linux/magic.h`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("cgroup root {path}: {source}")]
    Root {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// cgroup v2 when the root is a cgroup2 mount (what the kernel says), or when it has the unified
/// hierarchy's `cgroup.controllers` (so a plain directory laid out like v2 is recognised too);
/// otherwise v1 (a tmpfs holding one mount per controller, or a hybrid).
pub fn detect_version(root: &Path) -> Result<CgroupVersion, DetectError> {
    let st = rustix::fs::statfs(root).map_err(|e| DetectError::Root {
        path: root.display().to_string(),
        source: e.into(),
    })?;
    // f_type's integer width differs between architectures; the magic fits in 32 bits.
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let magic = st.f_type as u64;
    if magic == CGROUP2_SUPER_MAGIC || root.join("cgroup.controllers").is_file() {
        Ok(CgroupVersion::V2)
    } else {
        Ok(CgroupVersion::V1)
    }
}

/// The driver from the kubelet's top cgroup name, as Koordinator does: `kubepods.slice` means
/// systemd, `kubepods` cgroupfs. `None` when the kubelet has not created either yet.
pub fn detect_driver(root: &Path, version: CgroupVersion) -> Option<CgroupDriver> {
    let base = match version {
        CgroupVersion::V1 => root.join("memory"),
        CgroupVersion::V2 => root.to_owned(),
    };
    if base.join("kubepods.slice").is_dir() {
        Some(CgroupDriver::Systemd)
    } else if base.join("kubepods").is_dir() {
        Some(CgroupDriver::Cgroupfs)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_dirs_and_unified_marker() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            detect_version(dir.path()).expect("statfs"),
            CgroupVersion::V1
        );
        assert_eq!(detect_driver(dir.path(), CgroupVersion::V1), None);
        std::fs::create_dir_all(dir.path().join("memory/kubepods.slice")).expect("mkdir");
        assert_eq!(
            detect_driver(dir.path(), CgroupVersion::V1),
            Some(CgroupDriver::Systemd)
        );
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory\n").expect("write");
        assert_eq!(
            detect_version(dir.path()).expect("statfs"),
            CgroupVersion::V2
        );
        std::fs::create_dir_all(dir.path().join("kubepods")).expect("mkdir");
        assert_eq!(
            detect_driver(dir.path(), CgroupVersion::V2),
            Some(CgroupDriver::Cgroupfs)
        );
        assert!(detect_version(&dir.path().join("missing")).is_err());
    }

    #[test]
    #[ignore = "needs cgroup v1 at /sys/fs/cgroup"]
    fn this_machine_v1_root_is_v1() {
        // On a host that mounts cgroup v1 controllers on a tmpfs the statfs answer must be v1
        // (a wrong magic constant would flip it).
        let root = Path::new("/sys/fs/cgroup");
        assert!(
            root.join("memory/memory.limit_in_bytes").is_file()
                && !root.join("cgroup.controllers").exists(),
            "needs cgroup v1 at /sys/fs/cgroup"
        );
        assert_eq!(detect_version(root).expect("statfs"), CgroupVersion::V1);
    }
}
