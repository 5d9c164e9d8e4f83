//! What a BE container may swap: pure.

use koord_api::knobs::PAGE_SIZE;
use koord_translator::pod::spec_view::ContainerSpecView;

/// The node's memory and swap, bytes (`/proc/meminfo` `MemTotal`, `SwapTotal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMemory {
    pub mem_total: u64,
    pub swap_total: u64,
}

/// The container's `memory.swap.max` grant: `percent` of its memory limit (`memory`, else
/// `batch-memory`; the node's memory when it has none), never more than the node's swap, in
/// whole pages; 0 on a node without swap.
pub fn grant_bytes(percent: u32, c: &ContainerSpecView, node: NodeMemory) -> u64 {
    let limit = c
        .effective_memory_limit()
        .and_then(|l| u64::try_from(l).ok())
        .unwrap_or(node.mem_total);
    let share = u128::from(limit) * u128::from(percent.min(100)) / 100;
    let bytes = u64::try_from(share)
        .unwrap_or(u64::MAX)
        .min(node.swap_total);
    let page = PAGE_SIZE.unsigned_abs();
    bytes / page * page
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const NODE: NodeMemory = NodeMemory {
        mem_total: 1536 * MIB,
        swap_total: 2048 * MIB,
    };

    fn container(memory_limit: Option<i64>, batch_limit: Option<i64>) -> ContainerSpecView {
        ContainerSpecView {
            name: "c".into(),
            memory_limit,
            batch_memory_limit: batch_limit,
            ..ContainerSpecView::default()
        }
    }

    #[test]
    fn the_grant_is_a_share_of_the_limit_within_the_swap() {
        let mib = |v: u64| i64::try_from(v * MIB).expect("small");
        let cases = [
            // (percent, memory limit, batch-memory limit, node, want)
            (50, Some(mib(1600)), None, NODE, 800 * MIB),
            (50, None, Some(mib(1000)), NODE, 500 * MIB),
            (100, Some(mib(4096)), None, NODE, 2048 * MIB),
            (25, None, None, NODE, 384 * MIB),
            (
                50,
                Some(mib(1600)),
                None,
                NodeMemory {
                    swap_total: 0,
                    ..NODE
                },
                0,
            ),
            (0, Some(mib(1600)), None, NODE, 0),
            (33, Some(10_000), None, NODE, 0),
            (33, Some(100_000), None, NODE, 32_768),
            (150, Some(mib(100)), None, NODE, 100 * MIB),
        ];
        for (percent, mem, batch, node, want) in cases {
            let got = grant_bytes(percent, &container(mem, batch), node);
            assert_eq!(got, want, "{percent}% of {mem:?}/{batch:?} on {node:?}");
        }
    }
}
