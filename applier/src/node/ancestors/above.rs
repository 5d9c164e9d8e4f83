//! The directories above `kubepods` when the kubelet's `cgroupRoot` is not `/` (`kubelet`,
//! `kubelet.slice` on kind). The kernel caps a cgroup's effective protection by every
//! ancestor's, so a `memory.min` of 0 there voids the `memory.min` of every pod below, whatever
//! this pass writes on `kubepods`. They are the operator's (the kubelet does not write them
//! either, nor with its own Memory QoS): this module only reads them and says so.

use std::path::PathBuf;

use koord_translator::cgroup::Controller;
use koord_translator::cgroup::file;
use koord_translator::cgroup::layout::Layout;

use super::plan::ProtectionFile;

/// The protection files above `kubepods` that hold 0 (absent files, as on mainline v1, are
/// not listed): each caps the pods' protection of that kind to nothing.
pub fn unprotected_above(layout: &Layout) -> Vec<PathBuf> {
    layout
        .kubelet_root_dirs()
        .iter()
        .filter_map(|rel| layout.dir(rel, Controller::Memory).ok())
        .flat_map(|dir| ProtectionFile::BOTH.map(|f| dir.join(f.name())))
        .filter(|path| file::read_or_report(path).is_some_and(|v| v == "0"))
        .collect()
}

/// Logs [`unprotected_above`] once, with what to do about it.
pub fn warn_unprotected_above(layout: &Layout) {
    for path in unprotected_above(layout) {
        tracing::warn!(
            file = %path.display(),
            kubelet_cgroup_root = %layout.kubelet_root,
            "0 above kubepods: the kernel caps this protection of every pod below the kubelet's cgroupRoot to 0; \
             set it on that cgroup (systemd: MemoryMin=/MemoryLow= of the slice) to at least what kubepods holds"
        );
    }
}
