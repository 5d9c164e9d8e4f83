//! Which nodes are local to a container and which are remote. Pure.
//!
//! Local nodes are the memory nodes whose CPUs intersect the container's cpuset, restricted to
//! the nodes its processes may allocate on (`Mems_allowed`), since the kernel refuses to move a
//! task's pages outside them. Remote nodes are every other memory node. There is nothing to do
//! on a one-node machine, when no node matches, or when the cpuset spans every node.

use serde::Serialize;

use super::topology::{IdSet, Topology};

/// The reference's text for every "nothing to migrate to" case.
pub const NO_TARGET_NUMA: &str = "no target numa";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NoTarget {
    /// The machine has fewer than two nodes with memory.
    SingleNode,
    /// The cpuset's CPUs are on every memory node.
    SpansAllNodes,
    /// No memory node holds the cpuset's CPUs (or none is in Mems_allowed).
    NoLocalNode,
}

impl std::fmt::Display for NoTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoTarget::SingleNode => "one NUMA node",
            NoTarget::SpansAllNodes => "cpuset spans every NUMA node",
            NoTarget::NoLocalNode => "no memory node holds the cpuset's CPUs",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Skip(NoTarget),
    Migrate { local: IdSet, remote: IdSet },
}

/// The target for a container whose processes may run on `cpus` and allocate on
/// `mems_allowed` (`None` = unrestricted).
pub fn select(topo: &Topology, cpus: &IdSet, mems_allowed: Option<&IdSet>) -> Target {
    if topo.is_single_node() {
        return Target::Skip(NoTarget::SingleNode);
    }
    let mut local: IdSet = topo
        .nodes_of_cpus(cpus)
        .intersection(&topo.memory)
        .copied()
        .collect();
    if let Some(mems) = mems_allowed {
        local.retain(|n| mems.contains(n));
    }
    if local.is_empty() {
        return Target::Skip(NoTarget::NoLocalNode);
    }
    let remote: IdSet = topo.memory.difference(&local).copied().collect();
    if remote.is_empty() {
        return Target::Skip(NoTarget::SpansAllNodes);
    }
    Target::Migrate { local, remote }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_list::parse_list;
    use std::collections::BTreeMap;

    fn l(s: &str) -> IdSet {
        parse_list(s).expect("list")
    }

    fn topo(nodes: &[(u32, &str)], memory: &str) -> Topology {
        Topology {
            cpus: nodes
                .iter()
                .map(|(n, c)| (*n, l(c)))
                .collect::<BTreeMap<_, _>>(),
            memory: l(memory),
        }
    }

    fn migrate(local: &str, remote: &str) -> Target {
        Target::Migrate {
            local: l(local),
            remote: l(remote),
        }
    }

    #[test]
    fn selection_table() {
        let two = topo(&[(0, "0-3,8-11"), (1, "4-7,12-15")], "0-1");
        let four = topo(&[(0, "0-1"), (1, "2-3"), (2, "4-5"), (3, "")], "0-3");
        let one = topo(&[(0, "0-1")], "0");
        let none = Topology::default();
        let cpu_only = topo(&[(0, "0"), (1, "1")], "0");
        let three = topo(&[(0, "0"), (1, "1"), (2, "2")], "0,2");
        let cases: Vec<(&str, &Topology, &str, Option<&str>, Target)> = vec![
            (
                "one node",
                &one,
                "0-1",
                None,
                Target::Skip(NoTarget::SingleNode),
            ),
            (
                "no numa dir",
                &none,
                "0",
                None,
                Target::Skip(NoTarget::SingleNode),
            ),
            ("on node 0", &two, "0-3", None, migrate("0", "1")),
            (
                "on node 1, second half",
                &two,
                "12",
                None,
                migrate("1", "0"),
            ),
            (
                "spans both",
                &two,
                "3-4",
                None,
                Target::Skip(NoTarget::SpansAllNodes),
            ),
            (
                "whole machine",
                &two,
                "0-15",
                None,
                Target::Skip(NoTarget::SpansAllNodes),
            ),
            (
                "cpus nowhere",
                &two,
                "99",
                None,
                Target::Skip(NoTarget::NoLocalNode),
            ),
            (
                "empty cpuset",
                &two,
                "",
                None,
                Target::Skip(NoTarget::NoLocalNode),
            ),
            (
                "mems forbid local",
                &two,
                "0-3",
                Some("1"),
                Target::Skip(NoTarget::NoLocalNode),
            ),
            (
                "mems allow local",
                &two,
                "0-3",
                Some("0-1"),
                migrate("0", "1"),
            ),
            ("two of four", &four, "1-2", None, migrate("0-1", "2-3")),
            (
                "memory-only node is remote",
                &four,
                "4",
                None,
                migrate("2", "0-1,3"),
            ),
            (
                "cpu-only node is not a target",
                &cpu_only,
                "1",
                None,
                Target::Skip(NoTarget::SingleNode),
            ),
            (
                "cpu-only local node among three",
                &three,
                "1",
                None,
                Target::Skip(NoTarget::NoLocalNode),
            ),
        ];
        for (name, t, cpus, mems, want) in cases {
            let mems = mems.map(l);
            assert_eq!(select(t, &l(cpus), mems.as_ref()), want, "{name}");
        }
    }
}
