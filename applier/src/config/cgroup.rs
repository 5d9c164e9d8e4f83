//! Where the cgroups are and how the kubelet lays them out: forced by the flags, else detected.

use std::path::PathBuf;

use koord_translator::cgroup::detect::{self, DetectError, detect_version};
use koord_translator::cgroup::kubelet_root::KubeletRoot;
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

/// `--cgroup-root`, `--cgroup-version`, `--cgroup-driver`, `--kubelet-cgroup-root`; `None` =
/// detect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    pub root: PathBuf,
    pub version: Option<CgroupVersion>,
    pub driver: Option<CgroupDriver>,
    pub kubelet_root: Option<KubeletRoot>,
}

impl CgroupConfig {
    /// The layout: forced values win, else detection; a node whose kubelet has not made its
    /// cgroups yet falls back to cgroupfs (the kubelet's default driver) at cgroupRoot `/`.
    pub fn layout(&self) -> Result<Layout, DetectError> {
        let version = match self.version {
            Some(v) => v,
            None => detect_version(&self.root)?,
        };
        let base = detect::kubepods_base(&self.root, version);
        let (driver, kubelet_root) = match &self.kubelet_root {
            Some(kr) => {
                let driver = self.driver.or_else(|| detect::driver_at(&base, kr)).unwrap_or_else(|| {
                    tracing::warn!(base = %base.display(), kubelet_cgroup_root = %kr, "no kubepods cgroup below the kubelet cgroup root; assuming the cgroupfs driver");
                    CgroupDriver::Cgroupfs
                });
                (driver, kr.clone())
            }
            None => match detect::choose(&detect::scan_kubepods(&base), self.driver)? {
                Some(found) => {
                    tracing::info!(dir = %base.join(&found.dir).display(), driver = %found.driver, kubelet_cgroup_root = %found.kubelet_root, "kubelet cgroup tree detected");
                    (found.driver, found.kubelet_root)
                }
                None => {
                    let driver = self.driver.unwrap_or(CgroupDriver::Cgroupfs);
                    tracing::warn!(base = %base.display(), %driver, "no kubepods cgroup found at the root or one or two levels down; assuming cgroupRoot / (set --kubelet-cgroup-root if the kubelet uses another)");
                    (driver, KubeletRoot::top())
                }
            },
        };
        Ok(Layout::new(self.root.clone(), version, driver).with_kubelet_root(kubelet_root))
    }
}
