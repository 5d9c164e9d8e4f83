//! What a BE container may swap: pure.

use k8s_openapi::api::core::v1::Pod;
use koord_api::keys::{LABEL_LEGACY_QOS_CLASS, LABEL_QOS_CLASS};
use koord_translator::pod::spec_view::ContainerSpecView;

const PAGE: u64 = 4096;

/// The node's memory and swap, bytes (`/proc/meminfo` `MemTotal`, `SwapTotal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMemory {
    pub mem_total: u64,
    pub swap_total: u64,
}

/// Whether the pod is BE by its `koordinator.sh/qosClass` label (else the legacy
/// `alibabacloud.com/qosClass`), as the webhook resolves the class.
pub fn is_be(pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let class = labels.and_then(|l| {
        l.get(LABEL_QOS_CLASS)
            .or_else(|| l.get(LABEL_LEGACY_QOS_CLASS))
    });
    class.is_some_and(|c| c == "BE")
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
    bytes / PAGE * PAGE
}

/// `memory.swap.max` as bytes: `max` is `u64::MAX`; `None` when it does not parse.
pub fn parse_swap_max(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => Some(u64::MAX),
        v => v.parse().ok(),
    }
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

    #[test]
    fn be_is_the_label_the_webhook_reads() {
        let pod = |labels: &[(&str, &str)]| {
            let mut p = Pod::default();
            p.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            p
        };
        assert!(is_be(&pod(&[(LABEL_QOS_CLASS, "BE")])));
        assert!(is_be(&pod(&[(LABEL_LEGACY_QOS_CLASS, "BE")])));
        assert!(!is_be(&pod(&[(LABEL_QOS_CLASS, "LS")])));
        assert!(!is_be(&pod(&[
            (LABEL_QOS_CLASS, "LS"),
            (LABEL_LEGACY_QOS_CLASS, "BE")
        ])));
        assert!(!is_be(&pod(&[])));
        assert!(!is_be(&Pod::default()));
    }

    #[test]
    fn swap_max_reads_max_and_bytes() {
        assert_eq!(parse_swap_max("max\n"), Some(u64::MAX));
        assert_eq!(parse_swap_max("0"), Some(0));
        assert_eq!(parse_swap_max("92274688"), Some(92_274_688));
        assert_eq!(parse_swap_max("-1"), None);
    }
}
