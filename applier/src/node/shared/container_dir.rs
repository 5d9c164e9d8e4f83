//! A container's cgroup, from the pod's UID and Kubernetes QoS class and the runtime's
//! container ID: never from annotation or other free text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use koord_translator::cgroup::Controller;
use koord_translator::cgroup::layout::{ContainerId, Layout, LayoutError};
use koord_translator::pod::spec_view::PodSpecView;

/// The container's cgroup relative to the hierarchy root (below the controller on v1).
pub fn container_rel(
    layout: &Layout,
    pod: &PodSpecView,
    container_id: &str,
) -> Result<PathBuf, LayoutError> {
    let id = ContainerId::parse(container_id)?;
    Ok(layout
        .pod_dir(&pod.uid, pod.kube_qos)?
        .join(layout.container_leaf(&id)))
}

/// The container's memory cgroup, under the cgroup root ([`Layout::dir`] refuses anything
/// else); `None` for an ID or UID the layout refuses.
pub fn container_memory_dir(
    layout: &Layout,
    pod: &PodSpecView,
    container_id: &str,
) -> Option<Arc<Path>> {
    let rel = container_rel(layout, pod, container_id).ok()?;
    layout.dir(&rel, Controller::Memory).ok().map(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_translator::cgroup::layout::KubeQos;
    use koord_translator::cgroup::{CgroupDriver, CgroupVersion};

    #[test]
    fn the_memory_dir_is_the_layouts_and_refuses_forged_ids() {
        let pod = PodSpecView {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab".into(),
            kube_qos: KubeQos::BestEffort,
            resolved_qos: None,
            containers: Vec::new(),
            overhead_memory: 0,
            pod_level: Default::default(),
        };
        let v1 = Layout::new("/sys/fs/cgroup", CgroupVersion::V1, CgroupDriver::Cgroupfs);
        assert_eq!(
            container_memory_dir(&v1, &pod, "containerd://abc").as_deref(),
            Some(Path::new(
                "/sys/fs/cgroup/memory/kubepods/besteffort/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab/abc"
            ))
        );
        assert_eq!(container_memory_dir(&v1, &pod, "abc"), None);
        assert_eq!(container_memory_dir(&v1, &pod, "containerd://../x"), None);
        let forged = PodSpecView {
            uid: "../x".into(),
            ..pod
        };
        assert_eq!(container_memory_dir(&v1, &forged, "containerd://abc"), None);
    }
}
