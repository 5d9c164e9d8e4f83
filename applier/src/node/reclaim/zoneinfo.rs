//! The node's free memory and the kernel's zone watermarks, from `/proc/zoneinfo`. Pure.
//!
//! Summed over every zone of every NUMA node: the kernel wakes kswapd per node when a zone's
//! free pages fall below its `low` watermark and reclaims until `high`; the sum is what the
//! node has in all, a coarse view on a multi-node machine (a node short of memory while another
//! has plenty is not seen).

/// Pages: free, and the sums of the zones' `min`, `low` and `high` watermarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub free: u64,
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

/// `None` when the text has no zone with watermarks (not a zoneinfo file).
pub fn parse_zoneinfo(text: &str) -> Option<NodeMemory> {
    let mut m = NodeMemory::default();
    let mut zones = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        // "pages free N"; the watermarks are "min N", "low N", "high N" alone on their lines.
        let (field, value) = match (key, value) {
            ("pages", "free") => ("free", words.next()),
            ("min" | "low" | "high", v) => (key, Some(v)),
            _ => continue,
        };
        let Some(n) = value.and_then(|v| v.parse::<u64>().ok()) else {
            continue;
        };
        match field {
            "free" => {
                m.free += n;
                zones += 1;
            }
            "min" => m.min += n,
            "low" => m.low += n,
            _ => m.high += n,
        }
    }
    (zones > 0 && m.high > 0).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONEINFO: &str = "Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 5
      nr_free_pages 999
  pages free     3840
        boost    0
        min      10
        low      13
        high     16
        spanned  4095
        protection: (0, 2970, 23868, 23868, 23868)
      nr_free_pages 3840
Node 0, zone   Normal
  pages free     1182077
        boost    0
        min      14769
        low      20163
        high     25557
Node 0, zone  Movable
  pages free     0
        min      32
        low      32
        high     32
";

    #[test]
    fn zones_are_summed_and_other_lines_ignored() {
        assert_eq!(
            parse_zoneinfo(ZONEINFO),
            Some(NodeMemory {
                free: 3840 + 1_182_077,
                min: 10 + 14_769 + 32,
                low: 13 + 20_163 + 32,
                high: 16 + 25_557 + 32,
            })
        );
    }

    #[test]
    fn not_a_zoneinfo_file() {
        assert_eq!(parse_zoneinfo(""), None);
        assert_eq!(parse_zoneinfo("MemTotal: 1 kB\nMemFree: 1 kB\n"), None);
    }
}
