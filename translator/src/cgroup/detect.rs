//! Which cgroup hierarchy the node uses, and where and how the kubelet made its tree
//! (driver and `cgroupRoot`). The reading of names is pure ([`interpret`], [`choose`]); the
//! directory walk ([`scan_kubepods`]) is the IO edge.

use std::path::{Component, Path, PathBuf};

use super::kubelet_root::KubeletRoot;
use super::layout::Layout;
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
    #[error(
        "the kubelet's kubepods cgroup is in more than one place: {0}; set \
         --kubelet-cgroup-root (KOORD_KUBELET_CGROUP_ROOT) to the kubelet's cgroupRoot \
         (`cgroupRoot:` in its config, e.g. /kubelet)"
    )]
    Ambiguous(String),
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

/// The directory the kubelet's tree is looked for in: the hierarchy root on v2, the memory
/// controller's mount on v1 (every controller holds the same tree).
pub fn kubepods_base(root: &Path, version: CgroupVersion) -> PathBuf {
    match version {
        CgroupVersion::V1 => root.join("memory"),
        CgroupVersion::V2 => root.to_owned(),
    }
}

/// Where the kubelet's `kubepods` cgroup is: its driver, the `cgroupRoot` it implies and the
/// directory (relative to [`kubepods_base`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub driver: CgroupDriver,
    pub kubelet_root: KubeletRoot,
    pub dir: PathBuf,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (cgroupRoot {}, {})",
            self.dir.display(),
            self.kubelet_root,
            self.driver
        )
    }
}

/// How deep below the base the kubepods cgroup is looked for: the base itself (cgroupRoot
/// `/`), then one and two levels of cgroupRoot (`kubelet/kubepods`, `a/b/kubepods`).
const MAX_DEPTH: usize = 3;

/// A name the kubelet gives its top cgroup: `kubepods` (cgroupfs), `kubepods.slice` or
/// `<prefix>-kubepods.slice` (systemd, below a non-`/` cgroupRoot).
fn looks_like_kubepods(name: &str) -> bool {
    name == "kubepods" || name == "kubepods.slice" || name.ends_with("-kubepods.slice")
}

/// The directories below `base` named like the kubelet's top cgroup, relative to `base`: those
/// directly in `base` when there are any (the usual node: nothing deeper is read), else all
/// those one and two levels down. Symlinks and unreadable directories are skipped; the kubepods
/// directories themselves are not entered (their children are pods).
pub fn scan_kubepods(base: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut level = vec![PathBuf::new()];
    for depth in 1..=MAX_DEPTH {
        let mut next = Vec::new();
        for rel in &level {
            for name in subdirs(&base.join(rel)) {
                let child = rel.join(&name);
                if name.to_str().is_some_and(looks_like_kubepods) {
                    found.push(child);
                } else if depth < MAX_DEPTH {
                    next.push(child);
                }
            }
        }
        // A kubelet at the top is this node's; below it, every level is searched so that two
        // candidates at different depths are both seen (and refused as ambiguous).
        if depth == 1 && !found.is_empty() {
            break;
        }
        level = next;
    }
    found.sort();
    found
}

/// The names of the real directories in `dir` (none when it cannot be read: reported).
fn subdirs(dir: &Path) -> Vec<std::ffi::OsString> {
    super::file::subdirs_or_report(dir)
        .into_iter()
        .filter_map(|p| p.file_name().map(ToOwned::to_owned))
        .collect()
}

/// What a kubepods-like directory says about the kubelet that made it (pure): cgroupfs
/// `<root...>/kubepods`, or systemd `<a>.slice/<a>-<b>.slice/.../<a>-<b>-kubepods.slice`
/// (the slice names unescaped as the kubelet's `ParseSystemdToCgroupName` does). `None` for a
/// directory no kubelet would name so (`x/kubepods.slice`, `foo-kubepods.slice` at the top):
/// the layout built from the answer must name exactly this directory again.
pub fn interpret(rel: &Path) -> Option<Found> {
    let names: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (last, parents) = names.split_last()?;
    let (driver, kubelet_root) = if *last == "kubepods" {
        (CgroupDriver::Cgroupfs, KubeletRoot::from_parts(parents)?)
    } else {
        let stem = last.strip_suffix(".slice")?;
        let mut parts: Vec<String> = stem.split('-').map(|p| p.replace('_', "-")).collect();
        if parts.pop().as_deref() != Some("kubepods") {
            return None;
        }
        (CgroupDriver::Systemd, KubeletRoot::from_parts(&parts)?)
    };
    let again = Layout::new("", CgroupVersion::V2, driver).with_kubelet_root(kubelet_root.clone());
    (again.kubepods_dir() == rel).then(|| Found {
        driver,
        kubelet_root,
        dir: rel.to_owned(),
    })
}

/// Picks the kubelet's tree among the directories [`scan_kubepods`] found (pure). A forced
/// driver keeps only its own names; one at the top wins (systemd's before cgroupfs's, as
/// before); otherwise exactly one must be left. `None`: the kubelet has made none yet.
pub fn choose(
    dirs: &[PathBuf],
    driver: Option<CgroupDriver>,
) -> Result<Option<Found>, DetectError> {
    let mut found: Vec<Found> = dirs
        .iter()
        .filter_map(|d| interpret(d))
        .filter(|f| driver.is_none_or(|d| d == f.driver))
        .collect();
    if let Some(top) = [CgroupDriver::Systemd, CgroupDriver::Cgroupfs]
        .into_iter()
        .find_map(|d| {
            found
                .iter()
                .find(|f| f.kubelet_root.is_top() && f.driver == d)
        })
    {
        return Ok(Some(top.clone()));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(DetectError::Ambiguous(
            found
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// The driver of a kubelet whose cgroupRoot is known: the one whose `kubepods` directory
/// exists below `base` (systemd's first). `None` when the kubelet has not made it yet.
pub fn driver_at(base: &Path, kubelet_root: &KubeletRoot) -> Option<CgroupDriver> {
    [CgroupDriver::Systemd, CgroupDriver::Cgroupfs]
        .into_iter()
        .find(|&d| {
            let l = Layout::new("", CgroupVersion::V2, d).with_kubelet_root(kubelet_root.clone());
            base.join(l.kubepods_dir()).is_dir()
        })
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
        let v1 = kubepods_base(dir.path(), CgroupVersion::V1);
        assert_eq!(v1, dir.path().join("memory"));
        assert_eq!(choose(&scan_kubepods(&v1), None).expect("one"), None);
        std::fs::create_dir_all(dir.path().join("memory/kubepods.slice")).expect("mkdir");
        let found = choose(&scan_kubepods(&v1), None).expect("one");
        assert_eq!(found.map(|f| f.driver), Some(CgroupDriver::Systemd));
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory\n").expect("write");
        assert_eq!(
            detect_version(dir.path()).expect("statfs"),
            CgroupVersion::V2
        );
        std::fs::create_dir_all(dir.path().join("kubepods")).expect("mkdir");
        let v2 = kubepods_base(dir.path(), CgroupVersion::V2);
        let found = choose(&scan_kubepods(&v2), None).expect("one");
        assert_eq!(found.map(|f| f.driver), Some(CgroupDriver::Cgroupfs));
        assert!(detect_version(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn interpret_table() {
        use CgroupDriver::{Cgroupfs, Systemd};
        let cases: [(&str, Option<(CgroupDriver, &str)>); 12] = [
            ("kubepods", Some((Cgroupfs, "/"))),
            ("kubepods.slice", Some((Systemd, "/"))),
            ("kubelet/kubepods", Some((Cgroupfs, "/kubelet"))),
            (
                "kubelet.slice/kubelet-kubepods.slice",
                Some((Systemd, "/kubelet")),
            ),
            ("a/b/kubepods", Some((Cgroupfs, "/a/b"))),
            (
                "a.slice/a-b.slice/a-b-kubepods.slice",
                Some((Systemd, "/a/b")),
            ),
            // The kubelet escapes `-` as `_` in a slice name and reads it back so.
            (
                "my_root.slice/my_root-kubepods.slice",
                Some((Systemd, "/my-root")),
            ),
            // Names no kubelet makes.
            ("x/kubepods.slice", None),
            ("foo-kubepods.slice", None),
            ("other.slice/kubelet-kubepods.slice", None),
            ("kubelet/../kubepods", None),
            ("kubelet/kubepods2", None),
        ];
        for (rel, want) in cases {
            let got = interpret(Path::new(rel)).map(|f| {
                assert_eq!(f.dir, PathBuf::from(rel));
                (f.driver, f.kubelet_root.to_string())
            });
            assert_eq!(got, want.map(|(d, r)| (d, r.to_owned())), "{rel}");
        }
    }

    /// Outcome of detection on a tree: the driver and cgroupRoot, none, or the error's text.
    type Outcome = Result<Option<(CgroupDriver, String)>, String>;

    fn detect_in(dirs: &[&str], driver: Option<CgroupDriver>) -> Outcome {
        let tmp = tempfile::tempdir().expect("tempdir");
        for d in dirs {
            std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
        }
        choose(&scan_kubepods(tmp.path()), driver)
            .map(|f| f.map(|f| (f.driver, f.kubelet_root.to_string())))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn detection_table() {
        use CgroupDriver::{Cgroupfs, Systemd};
        let found = |d, r: &str| Ok(Some((d, r.to_owned())));
        let cases: Vec<(&[&str], Option<CgroupDriver>, Outcome)> = vec![
            (&[], None, Ok(None)),
            (&["system.slice/containerd.service"], None, Ok(None)),
            (&["kubepods/burstable"], None, found(Cgroupfs, "/")),
            (&["kubepods.slice", "kubepods"], None, found(Systemd, "/")),
            (
                &["kubepods.slice", "kubepods"],
                Some(Cgroupfs),
                found(Cgroupfs, "/"),
            ),
            // The top wins: a nested kubelet (kind on this node) is not this node's.
            (
                &["kubepods", "kubelet/kubepods"],
                None,
                found(Cgroupfs, "/"),
            ),
            (
                &[
                    "kubelet/kubepods/besteffort",
                    "system.slice/kubelet.service",
                ],
                None,
                found(Cgroupfs, "/kubelet"),
            ),
            (
                &["kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"],
                None,
                found(Systemd, "/kubelet"),
            ),
            (&["a/b/kubepods"], None, found(Cgroupfs, "/a/b")),
            (
                &["a.slice/a-b.slice/a-b-kubepods.slice"],
                None,
                found(Systemd, "/a/b"),
            ),
            // Three levels of cgroupRoot are not searched (the flag reaches them).
            (&["a/b/c/kubepods"], None, Ok(None)),
            (&["x/kubepods.slice"], None, Ok(None)),
            (
                &["kubelet/kubepods", "k.slice/k-kubepods.slice"],
                Some(Systemd),
                found(Systemd, "/k"),
            ),
        ];
        for (dirs, driver, want) in cases {
            assert_eq!(detect_in(dirs, driver), want, "{dirs:?} {driver:?}");
        }
        let e = detect_in(&["kubelet/kubepods", "other/x/kubepods"], None).expect_err("two");
        for part in [
            "kubelet/kubepods (cgroupRoot /kubelet, cgroupfs)",
            "other/x/kubepods (cgroupRoot /other/x, cgroupfs)",
            "--kubelet-cgroup-root",
            "KOORD_KUBELET_CGROUP_ROOT",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
    }

    #[test]
    fn symlinks_are_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("real/kubepods")).expect("mkdir");
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("link"))
            .expect("symlink");
        assert_eq!(
            scan_kubepods(tmp.path()),
            vec![PathBuf::from("real/kubepods")]
        );
    }

    #[test]
    fn driver_of_a_known_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = KubeletRoot::parse("/kubelet").expect("root");
        assert_eq!(driver_at(tmp.path(), &root), None);
        std::fs::create_dir_all(tmp.path().join("kubelet/kubepods")).expect("mkdir");
        assert_eq!(driver_at(tmp.path(), &root), Some(CgroupDriver::Cgroupfs));
        std::fs::create_dir_all(tmp.path().join("kubelet.slice/kubelet-kubepods.slice"))
            .expect("mkdir");
        assert_eq!(driver_at(tmp.path(), &root), Some(CgroupDriver::Systemd));
        assert_eq!(driver_at(tmp.path(), &KubeletRoot::top()), None);
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
