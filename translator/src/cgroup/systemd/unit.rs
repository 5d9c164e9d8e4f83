//! Which cgroup directories are systemd units, and their names. Pure.
//!
//! With the kubelet's systemd driver every directory from `kubepods` down is a unit systemd
//! owns: the kubelet's slices (`kubepods.slice`, `kubepods-burstable.slice`, the pod slices)
//! and the runtime's scopes (`cri-containerd-<id>.scope`). Its name is the directory's last
//! component. Nothing above `kubepods` (the kubelet's cgroupRoot, the operator's) and nothing on
//! the cgroupfs driver or on cgroup v1 is treated as a unit: those keep plain file writes.

use std::path::{Component, Path, PathBuf};

use crate::cgroup::layout::Layout;
use crate::cgroup::{CgroupDriver, CgroupVersion};

/// Names the systemd units of one node's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitNamer {
    /// The absolute `kubepods` directory: it and everything below it are units.
    kubepods: PathBuf,
}

/// The longest unit name systemd accepts (`UNIT_NAME_MAX`).
const UNIT_NAME_MAX: usize = 255;

impl UnitNamer {
    /// `None` unless the layout is cgroup v2 with the systemd driver.
    pub fn new(layout: &Layout) -> Option<Self> {
        if layout.driver != CgroupDriver::Systemd || layout.version != CgroupVersion::V2 {
            return None;
        }
        Some(Self {
            kubepods: layout.root.join(layout.kubepods_dir()),
        })
    }

    /// The unit whose cgroup is `dir` (absolute): `kubepods` or a directory below it whose name
    /// is a slice or scope name systemd would accept; else `None` (a plain file write).
    pub fn unit(&self, dir: &Path) -> Option<String> {
        let rest = dir.strip_prefix(&self.kubepods).ok()?;
        if rest
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return None;
        }
        let name = dir.file_name()?.to_str()?;
        is_unit_name(name).then(|| name.to_owned())
    }
}

/// A slice or scope name as systemd's `unit_name_is_valid` takes it (no templates): the
/// characters `[A-Za-z0-9:_.\-]`, a non-empty prefix, at most [`UNIT_NAME_MAX`] bytes.
pub fn is_unit_name(name: &str) -> bool {
    let Some(prefix) = name
        .strip_suffix(".slice")
        .or_else(|| name.strip_suffix(".scope"))
    else {
        return false;
    };
    !prefix.is_empty()
        && name.len() <= UNIT_NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::kubelet_root::KubeletRoot;

    #[test]
    fn unit_names_table() {
        let top = Layout::new("/sys/fs/cgroup", CgroupVersion::V2, CgroupDriver::Systemd);
        let kind = top
            .clone()
            .with_kubelet_root(KubeletRoot::parse("/kubelet").expect("root"));
        let scope = format!("cri-containerd-{}.scope", "ab12".repeat(16));
        let pod = "kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice";
        let cases: Vec<(&Layout, String, Option<&str>)> = vec![
            (&top, "/sys/fs/cgroup/kubepods.slice".into(), Some("kubepods.slice")),
            (
                &top,
                "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice".into(),
                Some("kubepods-besteffort.slice"),
            ),
            (
                &top,
                format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{pod}"),
                Some(pod),
            ),
            (
                &top,
                format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{pod}/{scope}"),
                Some(scope.as_str()),
            ),
            (
                &kind,
                "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice"
                    .into(),
                Some("kubelet-kubepods-burstable.slice"),
            ),
            // The cgroupRoot's own slice is the operator's, never a unit of ours.
            (&kind, "/sys/fs/cgroup/kubelet.slice".into(), None),
            // Outside the kubelet's tree, and names no unit has.
            (&top, "/sys/fs/cgroup/system.slice".into(), None),
            (&top, "/sys/fs/cgroup".into(), None),
            (
                &top,
                "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/sub".into(),
                None,
            ),
            (
                &top,
                "/sys/fs/cgroup/kubepods.slice/../system.slice".into(),
                None,
            ),
            (&top, "/sys/fs/cgroup/kubepods.slice/x y.slice".into(), None),
            (&top, "/sys/fs/cgroup/kubepods.slice/.slice".into(), None),
        ];
        for (layout, dir, want) in cases {
            let namer = UnitNamer::new(layout).expect("systemd v2");
            assert_eq!(namer.unit(Path::new(&dir)).as_deref(), want, "{dir}");
        }
        assert!(is_unit_name(&format!("{}.slice", "a".repeat(249))));
        assert!(!is_unit_name(&format!("{}.slice", "a".repeat(250))));
    }

    #[test]
    fn only_systemd_on_v2() {
        for (version, driver, some) in [
            (CgroupVersion::V2, CgroupDriver::Systemd, true),
            (CgroupVersion::V2, CgroupDriver::Cgroupfs, false),
            (CgroupVersion::V1, CgroupDriver::Systemd, false),
            (CgroupVersion::V1, CgroupDriver::Cgroupfs, false),
        ] {
            let l = Layout::new("/r", version, driver);
            assert_eq!(UnitNamer::new(&l).is_some(), some, "{version} {driver}");
        }
    }
}
