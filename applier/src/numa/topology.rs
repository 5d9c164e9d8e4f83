//! The machine's NUMA nodes from sysfs (`<sys>/devices/system/node/nodeN/cpulist`,
//! `has_memory`) and the kernel's list format (`0-3,8,10-11`) used by `cpulist`,
//! `cpuset.cpus` and `Cpus_allowed_list`.
//!
//! Parsing is pure; [`Topology::read`] is the only IO.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A set of CPU or node numbers.
pub type IdSet = BTreeSet<u32>;

/// Largest id accepted in a list: bounds memory on hostile input (the kernel's own limits are
/// 8192 CPUs and 1024 nodes).
pub const MAX_ID: u32 = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("{0:?} is not a kernel list (like 0-3,8)")]
    Syntax(String),
    #[error("{0:?}: id above {MAX_ID}")]
    TooLarge(String),
}

/// Parses the kernel list format: comma-separated ids and inclusive ranges, whitespace
/// around it ignored, empty = empty set (an empty `cpuset.cpus` on v2 means "inherit").
pub fn parse_list(text: &str) -> Result<IdSet, ListError> {
    let text = text.trim();
    let mut set = IdSet::new();
    if text.is_empty() {
        return Ok(set);
    }
    let bad = || ListError::Syntax(text.to_owned());
    let num = |s: &str| -> Result<u32, ListError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u64 = s
            .parse()
            .map_err(|_| ListError::TooLarge(text.to_owned()))?;
        if n > u64::from(MAX_ID) {
            return Err(ListError::TooLarge(text.to_owned()));
        }
        Ok(n as u32)
    };
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad());
                }
                set.extend(a..=b);
            }
            None => {
                set.insert(num(part)?);
            }
        }
    }
    Ok(set)
}

/// The kernel list format of `set` (`0-3,8`); `-` for the empty set.
pub fn format_list(set: &IdSet) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    if out.is_empty() {
        "-".to_owned()
    } else {
        out.join(",")
    }
}

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

    #[test]
    fn list_table() {
        let ok: &[(&str, &[u32])] = &[
            ("", &[]),
            ("\n", &[]),
            ("0", &[0]),
            ("0-3\n", &[0, 1, 2, 3]),
            ("0-1,4,6-7", &[0, 1, 4, 6, 7]),
            ("5,1", &[1, 5]),
            ("3-3", &[3]),
        ];
        for (text, want) in ok {
            assert_eq!(parse_list(text), Ok(set(want)), "{text:?}");
        }
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1 2", "0x1", "+1"] {
            assert!(
                matches!(parse_list(bad), Err(ListError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_list("0-4294967295"),
            Err(ListError::TooLarge(_))
        ));
        assert!(matches!(
            parse_list("99999999999999999999"),
            Err(ListError::TooLarge(_))
        ));
    }

    #[test]
    fn format_round_trips() {
        for (ids, text) in [
            (&[][..], "-"),
            (&[0][..], "0"),
            (&[0, 1][..], "0-1"),
            (&[0, 1, 2, 5, 7, 8][..], "0-2,5,7-8"),
        ] {
            assert_eq!(format_list(&set(ids)), text);
            if text != "-" {
                assert_eq!(parse_list(text), Ok(set(ids)));
            }
        }
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
    fn this_machine_topology_reads() {
        let t = Topology::read(Path::new("/")).expect("this machine's sysfs");
        if t.cpus.is_empty() {
            eprintln!("SKIPPED this_machine_topology_reads: no /sys/devices/system/node here");
            return;
        }
        let all: IdSet = t.cpus.values().flatten().copied().collect();
        assert!(!all.is_empty(), "some node has CPUs");
        assert!(t.memory.iter().all(|n| t.cpus.contains_key(n)));
    }
}
