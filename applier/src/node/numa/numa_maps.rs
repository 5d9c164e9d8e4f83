//! `/proc/<pid>/numa_maps`: per-node page counts of a process, and the local-memory ratio.
//!
//! One line per VMA: `<start> <policy> [file=..|heap|stack] [anon=N] ... N<node>=<pages>...
//! kernelpagesize_kB=<k>`; `N<x>` counts the pages of that VMA currently mapped on node x, in
//! units of the VMA's page size (huge pages on `huge` VMAs). Pure.

use std::collections::BTreeMap;

use super::topology::IdSet;

/// One VMA's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmaNodes {
    pub start: u64,
    /// Bytes per page of this VMA (`kernelpagesize_kB`, 4 KiB when the kernel omits it).
    pub page_size: u64,
    /// node -> pages of this VMA on it.
    pub pages: BTreeMap<u32, u64>,
}

/// A process's (or a container's, summed) memory per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    /// node -> pages (as numa_maps counts them: huge pages count once).
    pub pages: BTreeMap<u32, u64>,
    /// node -> bytes.
    pub bytes: BTreeMap<u32, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("numa_maps line {line}: {what}")]
pub struct NumaMapsError {
    pub line: usize,
    pub what: String,
}

const DEFAULT_PAGE: u64 = 4096;

/// One line's address, page size and `N<node>=<pages>` counts (into `nodes`, cleared first);
/// `None` for a blank line. Bytes, not `str`: a mapped file's name may be any bytes, and such a
/// process still has pages to count.
fn scan_line(
    line: &[u8],
    number: usize,
    nodes: &mut Vec<(u32, u64)>,
) -> Result<Option<(u64, u64)>, NumaMapsError> {
    let err = |what: String| NumaMapsError { line: number, what };
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    nodes.clear();
    let mut tokens = line
        .split(u8::is_ascii_whitespace)
        .filter(|t| !t.is_empty());
    let Some(start) = tokens.next() else {
        return Ok(None);
    };
    let start = std::str::from_utf8(start)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| err(format!("start address {:?} is not hex", lossy(start))))?;
    let mut page_size = DEFAULT_PAGE;
    for tok in tokens {
        let Some(eq) = tok.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (key, value) = (&tok[..eq], &tok[eq + 1..]);
        if key == b"kernelpagesize_kB" {
            let kb =
                decimal(value).ok_or_else(|| err(format!("bad page size {:?}", lossy(tok))))?;
            page_size = kb.saturating_mul(1024);
        } else if let Some(node) = key.strip_prefix(b"N")
            && !node.is_empty()
            && node.iter().all(u8::is_ascii_digit)
        {
            let node = decimal(node)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| err(format!("bad node {:?}", lossy(tok))))?;
            let n =
                decimal(value).ok_or_else(|| err(format!("bad page count {:?}", lossy(tok))))?;
            nodes.push((node, n));
        }
    }
    Ok(Some((start, page_size)))
}

/// An unsigned decimal with no sign and no overflow.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, b| {
        let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
        acc.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// Parses every VMA line. Lines with no page on any node are kept with empty `pages`.
pub fn parse_vmas(text: impl AsRef<[u8]>) -> Result<Vec<VmaNodes>, NumaMapsError> {
    let mut out = Vec::new();
    let mut nodes = Vec::new();
    for (i, line) in text.as_ref().split(|b| *b == b'\n').enumerate() {
        let Some((start, page_size)) = scan_line(line, i + 1, &mut nodes)? else {
            continue;
        };
        let mut vma = VmaNodes {
            start,
            page_size,
            pages: BTreeMap::new(),
        };
        for &(node, n) in &nodes {
            *vma.pages.entry(node).or_default() += n;
        }
        out.push(vma);
    }
    Ok(out)
}

impl NodeUsage {
    pub fn from_vmas(vmas: &[VmaNodes]) -> Self {
        let mut u = Self::default();
        for v in vmas {
            for (node, n) in &v.pages {
                u.count(*node, *n, v.page_size);
            }
        }
        u
    }

    /// Parses a whole numa_maps file straight into the per-node sums: one pass over the
    /// bytes, nothing kept per VMA (the locality pass reads it twice per process).
    pub fn parse(text: impl AsRef<[u8]>) -> Result<Self, NumaMapsError> {
        let mut u = Self::default();
        let mut nodes = Vec::new();
        for (i, line) in text.as_ref().split(|b| *b == b'\n').enumerate() {
            if let Some((_, page_size)) = scan_line(line, i + 1, &mut nodes)? {
                for &(node, n) in &nodes {
                    u.count(node, n, page_size);
                }
            }
        }
        Ok(u)
    }

    fn count(&mut self, node: u32, pages: u64, page_size: u64) {
        let p = self.pages.entry(node).or_default();
        *p = p.saturating_add(pages);
        let b = self.bytes.entry(node).or_default();
        *b = b.saturating_add(pages.saturating_mul(page_size));
    }

    /// Adds another process's usage (a container is the sum of its processes).
    pub fn add(&mut self, other: &NodeUsage) {
        for (n, p) in &other.pages {
            *self.pages.entry(*n).or_default() += p;
        }
        for (n, b) in &other.bytes {
            *self.bytes.entry(*n).or_default() += b;
        }
    }

    /// Local versus remote split for `local` nodes.
    pub fn locality(&self, local: &IdSet) -> Locality {
        let mut l = Locality::default();
        for (n, b) in &self.bytes {
            if local.contains(n) {
                l.local_bytes += b;
            } else {
                l.remote_bytes += b;
            }
        }
        l.remote_pages = self
            .pages
            .iter()
            .filter(|(n, _)| !local.contains(n))
            .map(|(_, p)| p)
            .sum();
        l.remote_nodes = self
            .pages
            .iter()
            .filter(|(n, p)| !local.contains(n) && **p > 0)
            .map(|(n, _)| *n)
            .collect();
        l
    }
}

/// How much of a container's memory is on its local nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Locality {
    pub local_bytes: u64,
    pub remote_bytes: u64,
    /// Pages on remote nodes ("rest remote memory pages").
    pub remote_pages: u64,
    /// Remote nodes that hold at least one page.
    pub remote_nodes: IdSet,
}

impl Locality {
    /// Percent of the bytes that are local, rounded down so 100 means all of it; a process
    /// with no mapped page is 100 (nothing is remote).
    pub fn local_ratio_percent(&self) -> u64 {
        let total = self.local_bytes + self.remote_bytes;
        if total == 0 {
            return 100;
        }
        // u128: bytes * 100 cannot overflow.
        (u128::from(self.local_bytes) * 100 / u128::from(total)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d1c0a00000 default file=/usr/bin/redis-server mapped=120 mapmax=2 N0=100 N1=20 kernelpagesize_kB=4
55d1c0c00000 default heap anon=2560 dirty=2560 active=0 N0=512 N1=2048 kernelpagesize_kB=4
7f0000000000 default anon=1 dirty=1 N1=1 kernelpagesize_kB=4
7f1000000000 bind:1 file=/anon_hugepage\\040(deleted) huge anon=3 dirty=3 N0=3 kernelpagesize_kB=2048
7f2000000000 default file=/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
";

    fn nodes(ids: &[u32]) -> IdSet {
        ids.iter().copied().collect()
    }

    #[test]
    fn parses_pages_and_bytes_per_node() {
        let vmas = parse_vmas(SAMPLE).expect("parses");
        assert_eq!(vmas.len(), 6);
        assert_eq!(vmas[0].start, 0x55d1_c0a0_0000);
        assert_eq!(vmas[3].page_size, 2 << 20);
        assert!(vmas[4].pages.is_empty(), "a VMA with no pages");
        let u = NodeUsage::from_vmas(&vmas);
        assert_eq!(u.pages[&0], 100 + 512 + 3 + 3);
        assert_eq!(u.pages[&1], 20 + 2048 + 1);
        assert_eq!(u.bytes[&0], (100 + 512 + 3) * 4096 + 3 * (2 << 20));
        assert_eq!(u.bytes[&1], (20 + 2048 + 1) * 4096);
    }

    #[test]
    fn ratio_arithmetic_table() {
        let u = NodeUsage::parse(SAMPLE).expect("parses");
        let b0 = (100 + 512 + 3) * 4096 + 3 * (2 << 20);
        let b1 = (20 + 2048 + 1) * 4096;
        let on1 = u.locality(&nodes(&[1]));
        assert_eq!(on1.local_bytes, b1);
        assert_eq!(on1.remote_bytes, b0);
        assert_eq!(on1.remote_pages, 618);
        assert_eq!(on1.remote_nodes, nodes(&[0]));
        assert_eq!(on1.local_ratio_percent(), b1 * 100 / (b0 + b1));
        let on0 = u.locality(&nodes(&[0]));
        assert_eq!(on0.remote_pages, 2069);
        assert_eq!(
            on0.local_ratio_percent() + on1.local_ratio_percent(),
            99,
            "both round down"
        );
        assert_eq!(u.locality(&nodes(&[0, 1])).local_ratio_percent(), 100);
        assert_eq!(u.locality(&nodes(&[0, 1])).remote_pages, 0);
        let cases = [
            (0, 0, 100),
            (1, 0, 100),
            (0, 1, 0),
            (199, 1, 99),
            (1, 1, 50),
            (u64::MAX / 2, u64::MAX / 2, 50),
        ];
        for (local_bytes, remote_bytes, want) in cases {
            let l = Locality {
                local_bytes,
                remote_bytes,
                ..Default::default()
            };
            assert_eq!(
                l.local_ratio_percent(),
                want,
                "{local_bytes}/{remote_bytes}"
            );
        }
    }

    #[test]
    fn sums_processes() {
        let mut a = NodeUsage::parse("1000 default anon=2 N0=2 kernelpagesize_kB=4\n").expect("a");
        let b = NodeUsage::parse("2000 default anon=3 N1=3 kernelpagesize_kB=4\n").expect("b");
        a.add(&b);
        assert_eq!(a.pages, BTreeMap::from([(0, 2), (1, 3)]));
        assert_eq!(a.locality(&nodes(&[1])).local_ratio_percent(), 60);
    }

    #[test]
    fn rejects_malformed_numbers() {
        for bad in [
            "zzzz default N0=1\n",
            "1000 default N0=x kernelpagesize_kB=4\n",
            "1000 default N0=1 kernelpagesize_kB=four\n",
            "1000 default N99999999999=1\n",
        ] {
            assert!(NodeUsage::parse(bad).is_err(), "{bad:?}");
        }
        // Tokens that are not node counts are ignored.
        let u = NodeUsage::parse("1000 default Nx=3 mapmax=2 N=4 N0=1\n").expect("parses");
        assert_eq!(u.pages, BTreeMap::from([(0, 1)]));
    }

    #[test]
    fn file_names_that_are_not_utf8_still_count() {
        let mut text = b"1000 default file=/data/".to_vec();
        text.extend_from_slice(&[0xff, 0xfe]);
        text.extend_from_slice(b" mapped=2 N1=2 kernelpagesize_kB=4\n2000 default anon=1 N0=1\n");
        let u = NodeUsage::parse(&text).expect("parses");
        assert_eq!(u.pages, BTreeMap::from([(0, 1), (1, 2)]));
        assert_eq!(
            parse_vmas(&text).expect("parses")[0].pages,
            BTreeMap::from([(1, 2)])
        );
    }

    #[test]
    fn the_summing_parser_agrees_with_the_vma_parser() {
        let vmas = parse_vmas(SAMPLE).expect("parses");
        assert_eq!(
            NodeUsage::parse(SAMPLE).expect("parses"),
            NodeUsage::from_vmas(&vmas)
        );
        assert_eq!(NodeUsage::parse("").expect("empty"), NodeUsage::default());
        assert_eq!(
            NodeUsage::parse("\n\n").expect("blank lines"),
            NodeUsage::default()
        );
    }

    #[test]
    #[ignore = "needs a kernel with NUMA (/proc/self/numa_maps)"]
    fn this_process_numa_maps_parse() {
        let text = std::fs::read_to_string("/proc/self/numa_maps")
            .unwrap_or_else(|e| panic!("needs a kernel with NUMA (/proc/self/numa_maps): {e}"));
        let u = NodeUsage::parse(&text).expect("the kernel's own numa_maps parses");
        assert!(
            u.pages.values().sum::<u64>() > 0,
            "a running test maps pages"
        );
    }
}
