//! The machine's NUMA nodes from sysfs (`<sys>/devices/system/node/nodeN/cpulist`,
//! `has_memory`), in the kernel list format of [`crate::cpu_list`].
//!
//! [`Topology::read`] is the only IO.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::cpu_list::IdSet;
use crate::cpu_list::{ListError, parse_list};

/// The nodes of this machine: each node's CPUs and whether it has memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// node id -> its CPUs (possibly empty for a memory-only node).
    pub cpus: BTreeMap<u32, IdSet>,
    /// Nodes with memory (`has_memory`; every node when the file is missing).
    pub memory: IdSet,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    List {
        path: String,
        #[source]
        source: ListError,
    },
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn read_list(path: &Path) -> Result<IdSet, TopologyError> {
    parse_list(&read(path)?).map_err(|source| TopologyError::List {
        path: path.display().to_string(),
        source,
    })
}

/// `<sys_root>/devices/system/node`.
pub fn node_dir(sys_root: &Path) -> PathBuf {
    sys_root.join("devices/system/node")
}

impl Topology {
    /// Reads `<sys_root>/devices/system/node`. A kernel without NUMA has no such directory:
    /// that is one node holding every CPU, which [`Topology::is_single_node`] reports.
    pub fn read(sys_root: &Path) -> Result<Self, TopologyError> {
        let dir = node_dir(sys_root);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(TopologyError::Io {
                    path: dir.display().to_string(),
                    source,
                });
            }
        };
        let mut cpus = BTreeMap::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            cpus.insert(id, read_list(&entry.path().join("cpulist"))?);
        }
        let has_memory = dir.join("has_memory");
        let memory = if has_memory.exists() {
            read_list(&has_memory)?
        } else {
            cpus.keys().copied().collect()
        };
        Ok(Self { cpus, memory })
    }

    /// Fewer than two nodes with memory: no page can be remote.
    pub fn is_single_node(&self) -> bool {
        self.memory.len() < 2
    }

    /// Nodes whose CPUs intersect `cpus`.
    pub fn nodes_of_cpus(&self, cpus: &IdSet) -> IdSet {
        self.cpus
            .iter()
            .filter(|(_, c)| !c.is_disjoint(cpus))
            .map(|(n, _)| *n)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> IdSet {
        ids.iter().copied().collect()
    }
    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn reads_a_two_node_sysfs_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        write(root, "devices/system/node/node0/cpulist", "0-3,8-11\n");
        write(root, "devices/system/node/node1/cpulist", "4-7,12-15\n");
        write(root, "devices/system/node/node2/cpulist", "\n");
        write(root, "devices/system/node/has_memory", "0-2\n");
        write(root, "devices/system/node/possible", "0-2\n");
        std::fs::create_dir_all(root.join("devices/system/node/power")).expect("mkdir");
        let t = Topology::read(root).expect("topology");
        assert_eq!(t.cpus.len(), 3);
        assert_eq!(t.cpus[&1], parse_list("4-7,12-15").expect("list"));
        assert_eq!(t.memory, set(&[0, 1, 2]));
        assert!(!t.is_single_node());
        assert_eq!(t.nodes_of_cpus(&set(&[9])), set(&[0]));
        assert_eq!(t.nodes_of_cpus(&set(&[3, 4])), set(&[0, 1]));
        assert_eq!(t.nodes_of_cpus(&set(&[99])), set(&[]));
    }

    #[test]
    fn missing_node_dir_is_one_node_and_bad_cpulist_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Topology::read(dir.path()).expect("no NUMA");
        assert!(t.is_single_node());
        write(dir.path(), "devices/system/node/node0/cpulist", "0-x\n");
        assert!(matches!(
            Topology::read(dir.path()),
            Err(TopologyError::List { .. })
        ));
    }

    #[test]
    #[ignore = "needs a kernel with NUMA (/sys/devices/system/node)"]
    fn this_machine_topology_reads() {
        let t = Topology::read(Path::new("/sys")).expect("this machine's sysfs");
        assert!(
            !t.cpus.is_empty(),
            "needs a kernel with NUMA (/sys/devices/system/node)"
        );
        let all: IdSet = t.cpus.values().flatten().copied().collect();
        assert!(!all.is_empty(), "some node has CPUs");
        assert!(t.memory.iter().all(|n| t.cpus.contains_key(n)));
    }
}
