//! Kubelet's cgroup naming: the pod directory from the pod UID and Kubernetes QoS class, the
//! container directory from the runtime's container ID, and the file path of a knob.
//!
//! Pure. Every name that ends up in a path is validated here (the UID is hex and dashes, a
//! container ID is ASCII alphanumerics), and the joined path is checked lexically to stay below
//! the cgroup root. The annotation never contributes to a path: it is user-editable free text.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::kubelet_root::KubeletRoot;
use super::{CgroupDriver, CgroupVersion, Controller};

/// Kubernetes QoS class (`status.qosClass`), which picks the kubelet parent cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum KubeQos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl KubeQos {
    pub fn from_status(s: &str) -> Option<Self> {
        match s {
            "Guaranteed" => Some(Self::Guaranteed),
            "Burstable" => Some(Self::Burstable),
            "BestEffort" => Some(Self::BestEffort),
            _ => None,
        }
    }

    /// The kubelet's QoS cgroup name; Guaranteed pods sit directly under `kubepods`.
    fn parent(self) -> Option<&'static str> {
        match self {
            Self::Guaranteed => None,
            Self::Burstable => Some("burstable"),
            Self::BestEffort => Some("besteffort"),
        }
    }
}

/// Container runtime, from the scheme of `status.containerStatuses[].containerID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
}

/// A validated container ID: the runtime and an ID of 1..=128 ASCII alphanumerics.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerId {
    runtime: Runtime,
    id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("pod UID {0:?} is not a Kubernetes UID (hex digits and dashes)")]
    PodUid(String),
    #[error("container ID {0:?} is not <runtime>://<id> with runtime containerd, cri-o or docker")]
    ContainerScheme(String),
    #[error("container ID {0:?} has characters other than ASCII letters and digits")]
    ContainerChars(String),
    #[error("path {0:?} leaves the cgroup root")]
    Escapes(PathBuf),
}

const MAX_ID_LEN: usize = 128;

impl ContainerId {
    /// Parses `containerd://<id>`, `cri-o://<id>` or `docker://<id>`.
    pub fn parse(raw: &str) -> Result<Self, LayoutError> {
        let (scheme, id) = raw
            .split_once("://")
            .ok_or_else(|| LayoutError::ContainerScheme(raw.to_owned()))?;
        let runtime = match scheme {
            "containerd" => Runtime::Containerd,
            "cri-o" => Runtime::Crio,
            "docker" => Runtime::Docker,
            _ => return Err(LayoutError::ContainerScheme(raw.to_owned())),
        };
        if id.is_empty() || id.len() > MAX_ID_LEN || !id.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(LayoutError::ContainerChars(raw.to_owned()));
        }
        Ok(Self {
            runtime,
            id: id.to_owned(),
        })
    }

    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Checks a pod UID: 1..=64 hex digits and dashes (UUIDs, and the hex hashes of static pods).
pub fn validate_pod_uid(uid: &str) -> Result<(), LayoutError> {
    if uid.is_empty() || uid.len() > 64 || !uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    {
        return Err(LayoutError::PodUid(uid.to_owned()));
    }
    Ok(())
}

/// Where the node's cgroups are and how they are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub root: PathBuf,
    pub version: CgroupVersion,
    pub driver: CgroupDriver,
    /// The kubelet's `cgroupRoot`: every directory this layout names is below it.
    pub kubelet_root: KubeletRoot,
}

impl Layout {
    /// A layout for a kubelet with `cgroupRoot: /` (the default); see [`Self::with_kubelet_root`].
    pub fn new(root: impl Into<PathBuf>, version: CgroupVersion, driver: CgroupDriver) -> Self {
        Self {
            root: root.into(),
            version,
            driver,
            kubelet_root: KubeletRoot::top(),
        }
    }

    /// The same layout for a kubelet whose `cgroupRoot` is `kubelet_root` (kind: `/kubelet`).
    pub fn with_kubelet_root(mut self, kubelet_root: KubeletRoot) -> Self {
        self.kubelet_root = kubelet_root;
        self
    }

    /// The kubelet's cgroup named `<cgroupRoot>/kubepods/<below...>` (its `CgroupName`), as a
    /// directory relative to the hierarchy root, the way each driver spells it
    /// (`pkg/kubelet/cm/cgroup_manager_linux.go`): cgroupfs joins the names with `/`; systemd
    /// escapes `-` as `_` in each name, joins them with `-` and expands the slice, so every
    /// ancestor is a slice named by the prefix (`kubelet.slice/kubelet-kubepods.slice/...`).
    fn kubelet_dir(&self, below: &[&str]) -> PathBuf {
        let names = self
            .kubelet_root
            .parts()
            .iter()
            .map(String::as_str)
            .chain(std::iter::once("kubepods"))
            .chain(below.iter().copied());
        let mut p = PathBuf::new();
        match self.driver {
            CgroupDriver::Cgroupfs => p.extend(names),
            CgroupDriver::Systemd => {
                let mut prefix = String::new();
                for name in names {
                    if !prefix.is_empty() {
                        prefix.push('-');
                    }
                    prefix.push_str(&name.replace('-', "_"));
                    p.push(format!("{prefix}.slice"));
                }
            }
        }
        p
    }

    /// The pod directory relative to the hierarchy root (below the controller on v1).
    pub fn pod_dir(&self, uid: &str, qos: KubeQos) -> Result<PathBuf, LayoutError> {
        validate_pod_uid(uid)?;
        let pod = format!("pod{uid}");
        Ok(match qos.parent() {
            Some(parent) => self.kubelet_dir(&[parent, &pod]),
            None => self.kubelet_dir(&[&pod]),
        })
    }

    /// The kubelet's `kubepods` cgroup, relative to the hierarchy root.
    pub fn kubepods_dir(&self) -> PathBuf {
        self.kubelet_dir(&[])
    }

    /// The kubelet's cgroupRoot and its ancestors below the hierarchy root, outermost first
    /// (`kubelet`, or `kubelet.slice` with systemd); empty for `cgroupRoot: /`. Not the
    /// kubelet's cgroups, but the kernel caps the protection of every pod by theirs.
    pub fn kubelet_root_dirs(&self) -> Vec<PathBuf> {
        let kubepods = self.kubepods_dir();
        let mut dirs: Vec<PathBuf> = kubepods
            .ancestors()
            .skip(1)
            .filter(|d| !d.as_os_str().is_empty())
            .map(Path::to_owned)
            .collect();
        dirs.reverse();
        dirs
    }

    /// The QoS-class parent of Burstable and BestEffort pods (`kubepods/burstable`); `None`
    /// for Guaranteed, whose pods sit directly under `kubepods`.
    pub fn qos_dir(&self, qos: KubeQos) -> Option<PathBuf> {
        qos.parent().map(|_| self.qos_parent_dir(qos))
    }

    /// The directory a class's pod directories sit in, relative to the hierarchy root:
    /// `kubepods` itself for Guaranteed, else the class's own directory.
    pub fn qos_parent_dir(&self, qos: KubeQos) -> PathBuf {
        match qos.parent() {
            Some(parent) => self.kubelet_dir(&[parent]),
            None => self.kubelet_dir(&[]),
        }
    }

    /// The container directory name below its pod directory.
    pub fn container_leaf(&self, id: &ContainerId) -> String {
        let id_str = id.id();
        match (self.driver, id.runtime()) {
            (CgroupDriver::Systemd, Runtime::Containerd) => {
                format!("cri-containerd-{id_str}.scope")
            }
            (CgroupDriver::Systemd, Runtime::Crio) => format!("crio-{id_str}.scope"),
            (CgroupDriver::Systemd, Runtime::Docker) => format!("docker-{id_str}.scope"),
            // CRI-O's cgroupfs manager prefixes "crio-"; containerd and docker use the bare id.
            (CgroupDriver::Cgroupfs, Runtime::Crio) => format!("crio-{id_str}"),
            (CgroupDriver::Cgroupfs, _) => id_str.to_owned(),
        }
    }

    /// The absolute directory holding `controller`'s files for the cgroup `rel`.
    pub fn dir(&self, rel: &Path, controller: Controller) -> Result<PathBuf, LayoutError> {
        // Lexical check: only plain names below the root. No canonicalisation, because the root
        // itself may legitimately contain symlinks (v1 controller mounts, test roots).
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(LayoutError::Escapes(rel.to_owned()));
        }
        let dir = match self.version {
            CgroupVersion::V1 => self.root.join(controller.dir_name()).join(rel),
            CgroupVersion::V2 => self.root.join(rel),
        };
        if !dir.starts_with(&self.root) {
            return Err(LayoutError::Escapes(dir));
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab";

    #[test]
    fn pod_dir_table() {
        let cases = [
            (
                CgroupDriver::Cgroupfs,
                KubeQos::Guaranteed,
                "kubepods/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab",
            ),
            (
                CgroupDriver::Cgroupfs,
                KubeQos::Burstable,
                "kubepods/burstable/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab",
            ),
            (
                CgroupDriver::Cgroupfs,
                KubeQos::BestEffort,
                "kubepods/besteffort/pod5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab",
            ),
            (
                CgroupDriver::Systemd,
                KubeQos::Guaranteed,
                "kubepods.slice/kubepods-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice",
            ),
            (
                CgroupDriver::Systemd,
                KubeQos::Burstable,
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice",
            ),
            (
                CgroupDriver::Systemd,
                KubeQos::BestEffort,
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab.slice",
            ),
        ];
        for (driver, qos, want) in cases {
            let layout = Layout::new("/sys/fs/cgroup", CgroupVersion::V2, driver);
            assert_eq!(
                layout.pod_dir(UID, qos).expect("valid uid"),
                PathBuf::from(want),
                "{driver} {qos:?}"
            );
        }
    }

    /// Every directory the layout names, for a kubelet with `cgroupRoot: /kubelet` (kind) and
    /// `/a/b`, under both drivers and both versions: the kubelet's own spelling
    /// (`NewCgroupName(root, "kubepods", ...)` then `ToCgroupfs`/`ToSystemd`).
    #[test]
    fn non_top_kubelet_root_table() {
        use CgroupDriver::{Cgroupfs, Systemd};
        let cid = ContainerId::parse(&format!("containerd://{}", "ab12".repeat(16))).expect("id");
        let u = "5f2a6b1e_0c1d_4e2f_8a9b_0123456789ab";
        // (root, driver, kubepods, burstable, BE pod dir, Guaranteed pod dir)
        let cases = [
            (
                "/kubelet",
                Cgroupfs,
                "kubelet/kubepods".to_owned(),
                "kubelet/kubepods/burstable".to_owned(),
                format!("kubelet/kubepods/besteffort/pod{UID}"),
                format!("kubelet/kubepods/pod{UID}"),
            ),
            (
                "/kubelet",
                Systemd,
                "kubelet.slice/kubelet-kubepods.slice".to_owned(),
                "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice".to_owned(),
                format!(
                    "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice"
                ),
                format!("kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{u}.slice"),
            ),
            (
                "/a/b",
                Cgroupfs,
                "a/b/kubepods".to_owned(),
                "a/b/kubepods/burstable".to_owned(),
                format!("a/b/kubepods/besteffort/pod{UID}"),
                format!("a/b/kubepods/pod{UID}"),
            ),
            (
                "/a/b",
                Systemd,
                "a.slice/a-b.slice/a-b-kubepods.slice".to_owned(),
                "a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-burstable.slice".to_owned(),
                format!(
                    "a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-besteffort.slice/a-b-kubepods-besteffort-pod{u}.slice"
                ),
                format!("a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-pod{u}.slice"),
            ),
            // systemd escapes `-` inside a name, as it does in the pod UID.
            (
                "/my-root",
                Systemd,
                "my_root.slice/my_root-kubepods.slice".to_owned(),
                "my_root.slice/my_root-kubepods.slice/my_root-kubepods-burstable.slice".to_owned(),
                format!(
                    "my_root.slice/my_root-kubepods.slice/my_root-kubepods-besteffort.slice/my_root-kubepods-besteffort-pod{u}.slice"
                ),
                format!("my_root.slice/my_root-kubepods.slice/my_root-kubepods-pod{u}.slice"),
            ),
        ];
        for (root, driver, kubepods, burstable, be_pod, g_pod) in cases {
            let kr = KubeletRoot::parse(root).expect("root");
            for version in [CgroupVersion::V1, CgroupVersion::V2] {
                let l = Layout::new("/cg", version, driver).with_kubelet_root(kr.clone());
                let what = format!("{root} {driver} {version}");
                assert_eq!(l.kubepods_dir(), PathBuf::from(&kubepods), "{what}");
                assert_eq!(
                    l.qos_dir(KubeQos::Burstable),
                    Some(PathBuf::from(&burstable)),
                    "{what}"
                );
                assert_eq!(l.qos_dir(KubeQos::Guaranteed), None, "{what}");
                assert_eq!(l.kubelet_root_dirs().len(), kr.parts().len(), "{what}");
                assert_eq!(
                    l.qos_parent_dir(KubeQos::Guaranteed),
                    PathBuf::from(&kubepods),
                    "{what}"
                );
                let be = l.pod_dir(UID, KubeQos::BestEffort).expect("uid");
                assert_eq!(be, PathBuf::from(&be_pod), "{what}");
                assert_eq!(
                    l.pod_dir(UID, KubeQos::Guaranteed).expect("uid"),
                    PathBuf::from(&g_pod),
                    "{what}"
                );
                // The container directory and the absolute path: below the hierarchy root,
                // under the controller's mount on v1.
                let container = be.join(l.container_leaf(&cid));
                let dir = l
                    .dir(&container, Controller::Memory)
                    .expect("below the root");
                let want = match version {
                    CgroupVersion::V1 => Path::new("/cg/memory").join(&container),
                    CgroupVersion::V2 => Path::new("/cg").join(&container),
                };
                assert_eq!(dir, want, "{what}");
                assert!(dir.starts_with("/cg"), "{what}");
            }
        }
    }

    #[test]
    fn kubelet_root_dirs_table() {
        for (root, driver, want) in [
            ("/kubelet", CgroupDriver::Cgroupfs, vec!["kubelet"]),
            ("/kubelet", CgroupDriver::Systemd, vec!["kubelet.slice"]),
            ("/a/b", CgroupDriver::Cgroupfs, vec!["a", "a/b"]),
            (
                "/a/b",
                CgroupDriver::Systemd,
                vec!["a.slice", "a.slice/a-b.slice"],
            ),
        ] {
            let l = Layout::new("/cg", CgroupVersion::V2, driver)
                .with_kubelet_root(KubeletRoot::parse(root).expect("root"));
            let want: Vec<PathBuf> = want.into_iter().map(PathBuf::from).collect();
            assert_eq!(l.kubelet_root_dirs(), want, "{root} {driver}");
        }
    }

    #[test]
    fn top_kubelet_root_is_the_default() {
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            let plain = Layout::new("/cg", CgroupVersion::V2, driver);
            let top = plain.clone().with_kubelet_root(KubeletRoot::top());
            assert_eq!(plain, top);
            assert!(plain.kubelet_root_dirs().is_empty());
            for qos in [KubeQos::Guaranteed, KubeQos::Burstable, KubeQos::BestEffort] {
                assert_eq!(plain.pod_dir(UID, qos), top.pod_dir(UID, qos));
            }
        }
    }

    #[test]
    fn container_leaf_table() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let cases = [
            (
                CgroupDriver::Systemd,
                "containerd",
                format!("cri-containerd-{id}.scope"),
            ),
            (CgroupDriver::Systemd, "cri-o", format!("crio-{id}.scope")),
            (
                CgroupDriver::Systemd,
                "docker",
                format!("docker-{id}.scope"),
            ),
            (CgroupDriver::Cgroupfs, "containerd", id.to_owned()),
            (CgroupDriver::Cgroupfs, "cri-o", format!("crio-{id}")),
            (CgroupDriver::Cgroupfs, "docker", id.to_owned()),
        ];
        for (driver, scheme, want) in cases {
            let layout = Layout::new("/r", CgroupVersion::V2, driver);
            let cid = ContainerId::parse(&format!("{scheme}://{id}")).expect("valid id");
            assert_eq!(layout.container_leaf(&cid), want, "{driver} {scheme}");
        }
    }

    #[test]
    fn rejects_forged_ids() {
        for bad in [
            "containerd://../../../etc",
            "containerd://abc/def",
            "containerd://",
            "containerd://abc def",
            "containerd://abc.scope",
            "rkt://abc",
            "abc",
            "docker://ab\u{0}c",
        ] {
            assert!(ContainerId::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(ContainerId::parse(&format!("docker://{}", "a".repeat(129))).is_err());
        for bad in ["", "../x", "5f2a/6b1e", "zz", "pod-1"] {
            assert!(
                validate_pod_uid(bad).is_err(),
                "uid {bad:?} must be refused"
            );
        }
        validate_pod_uid(UID).expect("uuid");
        validate_pod_uid("e3b0c44298fc1c149afbf4c8996fb924").expect("static pod hash");
    }

    #[test]
    fn dir_stays_under_root() {
        let v1 = Layout::new("/cg", CgroupVersion::V1, CgroupDriver::Cgroupfs);
        assert_eq!(
            v1.dir(Path::new("kubepods/pod1"), Controller::Memory),
            Ok(PathBuf::from("/cg/memory/kubepods/pod1"))
        );
        assert_eq!(
            v1.dir(Path::new("kubepods/pod1"), Controller::Cpu),
            Ok(PathBuf::from("/cg/cpu/kubepods/pod1"))
        );
        let v2 = Layout::new("/cg", CgroupVersion::V2, CgroupDriver::Cgroupfs);
        assert_eq!(
            v2.dir(Path::new("kubepods/pod1"), Controller::Cpu),
            Ok(PathBuf::from("/cg/kubepods/pod1"))
        );
        for bad in ["../etc", "kubepods/../../etc", "/etc", "./kubepods"] {
            assert!(
                v2.dir(Path::new(bad), Controller::Memory).is_err(),
                "{bad} must be refused"
            );
        }
    }
}
