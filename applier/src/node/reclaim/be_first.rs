//! BE first under node memory pressure: the Alibaba kernel's `memory.wmark_min_adj`, played by
//! the reclaim worker. Pure.
//!
//! On that kernel a memcg with a positive adjustment `a` (the reference's BE default is 50)
//! meets the zone's min watermark early, at `min + (low − min) × a / 100`: its allocations are
//! throttled there while the others go on, and kswapd reclaims. A negative one (LS, −25) may
//! allocate below `min`. Mainline has neither. What protects an LS pod's page cache there is
//! that the kernel's global reclaim (kswapd, woken below `low`, reclaiming up to `high`) never
//! has to run while BE pods hold reclaimable memory: so the worker reclaims from the BE containers first,
//! before free memory reaches the watermarks. A poller sees free memory once a tick, so it acts
//! one band early — below `high + (high − min) × a / 100` free pages, one tick's fall included
//! — and brings free memory back one band above that. What reclaim cannot take (anonymous
//! memory without swap) is held by the throttle ([`super::throttle`]), from the pressure
//! [`BeFirst::pressure`] reports.

use super::throttle::Pressure;
use super::zoneinfo::NodeMemory;

/// The node's recent fall of free memory, between ticks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BeFirst {
    last_free: Option<u64>,
    /// Pages lost per tick: the larger of the last tick's and half the previous estimate.
    fall: u64,
}

/// Where the worker acts, in pages of free memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Below it (one tick's fall included): reclaim from BE.
    pub act_below: u64,
    /// What the reclaim brings free memory back to.
    pub refill_to: u64,
}

impl Floor {
    /// The floor for the largest positive adjustment among the BE containers (1..=50).
    pub fn of(m: &NodeMemory, adj: i64) -> Self {
        let band = m.high.saturating_sub(m.min);
        let adj = u64::try_from(adj.clamp(0, 100)).unwrap_or(0);
        let act_below = m.high + band * adj / 100;
        Self {
            act_below,
            refill_to: act_below + band,
        }
    }
}

impl BeFirst {
    /// Pages to reclaim from BE now (0: free memory is above the floor, one tick ahead).
    pub fn step(&mut self, m: &NodeMemory, adj: i64) -> u64 {
        let fell = self.last_free.map_or(0, |l| l.saturating_sub(m.free));
        self.fall = fell.max(self.fall / 2);
        self.last_free = Some(m.free);
        if adj <= 0 {
            return 0;
        }
        let floor = Floor::of(m, adj);
        if m.free.saturating_sub(self.fall) >= floor.act_below {
            return 0;
        }
        (floor.refill_to + self.fall).saturating_sub(m.free)
    }

    /// The node as the throttle sees it, after [`BeFirst::step`] this tick (one tick's fall
    /// included). Under: below the Alibaba kernel's own throttle point for the adjustment,
    /// `min + (low − min) × a / 100` — below kswapd's `low`, so a node whose page cache keeps
    /// free memory between `low` and `high` (every busy node) never throttles its BE pods, as
    /// on that kernel. Clear: at or above `high` again (kswapd's goal, the node balanced).
    pub fn pressure(&self, m: &NodeMemory, adj: i64) -> Pressure {
        let adj = u64::try_from(adj.clamp(0, 100)).unwrap_or(0);
        let throttle_below = m.min + m.low.saturating_sub(m.min) * adj / 100;
        let ahead = m.free.saturating_sub(self.fall);
        if ahead < throttle_below {
            Pressure::Under
        } else if ahead >= m.high {
            Pressure::Clear
        } else {
            Pressure::Near
        }
    }

    /// The reclaim took `pages`: the next tick's fall is measured from there.
    pub fn reclaimed(&mut self, pages: u64) {
        if let Some(l) = self.last_free.as_mut() {
            *l = l.saturating_add(pages);
        }
    }
}

/// Splits `want` bytes over the BE containers by their usage, the largest first, each asked
/// for at most half its usage and at most `chunk` (one write's bound): per container, what to
/// ask for (0: nothing).
pub fn share(want: u64, usage: &[u64], chunk: u64) -> Vec<u64> {
    let mut order: Vec<usize> = (0..usage.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(usage[i]));
    let mut out = vec![0; usage.len()];
    let mut left = want;
    for i in order {
        if left == 0 {
            break;
        }
        let ask = left.min(usage[i] / 2).min(chunk);
        out[i] = ask;
        left -= ask;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cgroup v2 node's guest: 1.5 GiB, vm.min_free_kbytes 65536 (pages of 4 KiB).
    const GUEST: NodeMemory = NodeMemory {
        free: 0,
        min: 16_384,
        low: 20_480,
        high: 24_576,
    };

    fn at(free: u64) -> NodeMemory {
        NodeMemory { free, ..GUEST }
    }

    #[test]
    fn the_floor_is_one_band_above_the_alibaba_watermark() {
        // band = high - min = 8,192 pages (32 MiB); adj 50: high + 4,096.
        assert_eq!(
            Floor::of(&GUEST, 50),
            Floor {
                act_below: 28_672,
                refill_to: 36_864
            }
        );
        assert_eq!(Floor::of(&GUEST, 1).act_below, 24_576 + 81);
        assert_eq!(Floor::of(&GUEST, 0).act_below, 24_576);
    }

    #[test]
    fn each_tick_decides_from_free_memory_and_its_fall() {
        struct Case {
            name: &'static str,
            adj: i64,
            /// (free pages, pages to reclaim) per tick.
            ticks: &'static [(u64, u64)],
        }
        let cases = [
            Case {
                name: "plenty free: nothing",
                adj: 50,
                ticks: &[(100_000, 0), (90_000, 0), (80_000, 0)],
            },
            Case {
                name: "below the floor: back to one band above it",
                adj: 50,
                ticks: &[(28_000, 36_864 - 28_000)],
            },
            Case {
                // 40,000 -> 33,000: a fall of 7,000 a tick puts the next look under 28,672.
                name: "a fast fall is met a tick early, its size added",
                adj: 50,
                ticks: &[(40_000, 0), (33_000, 36_864 + 7_000 - 33_000)],
            },
            Case {
                name: "no BE asks for it (adjustment 0 or negative): nothing",
                adj: 0,
                ticks: &[(20_000, 0), (10_000, 0)],
            },
        ];
        for c in cases {
            let mut b = BeFirst::default();
            for (i, (free, want)) in c.ticks.iter().enumerate() {
                assert_eq!(b.step(&at(*free), c.adj), *want, "{}: tick {i}", c.name);
            }
        }
    }

    #[test]
    fn the_pressure_the_throttle_sees() {
        // adj 50: throttled below min + half the min-low band = 18,432 pages, released at high
        // (24,576); between them held.
        for (free, want) in [
            (15_000, Pressure::Under),
            (18_431, Pressure::Under),
            (18_432, Pressure::Near),
            (24_575, Pressure::Near),
            (24_576, Pressure::Clear),
        ] {
            let mut b = BeFirst::default();
            b.step(&at(free), 50);
            assert_eq!(b.pressure(&at(free), 50), want, "{free} pages free");
        }
        // Falling 8,000 pages a tick: 22,000 is under 18,432 one tick ahead.
        let mut b = BeFirst::default();
        b.step(&at(30_000), 50);
        b.step(&at(22_000), 50);
        assert_eq!(b.pressure(&at(22_000), 50), Pressure::Under);
    }

    #[test]
    fn what_was_reclaimed_is_not_counted_as_a_fall() {
        let mut b = BeFirst::default();
        assert_eq!(b.step(&at(30_000), 50), 0);
        b.reclaimed(5_000);
        // 30,000 + 5,000 reclaimed, then 34,000 read: a fall of 1,000, not a rise.
        assert_eq!(b.step(&at(34_000), 50), 0);
        assert_eq!(b.step(&at(28_500), 50), 36_864 + 5_500 - 28_500);
    }

    #[test]
    fn the_share_takes_the_largest_first_within_half_and_the_chunk() {
        const MIB: u64 = 1 << 20;
        let cases: [(u64, &[u64], Vec<u64>); 4] = [
            (10 * MIB, &[100 * MIB, 400 * MIB], vec![0, 10 * MIB]),
            (300 * MIB, &[100 * MIB, 400 * MIB], vec![50 * MIB, 64 * MIB]),
            (
                80 * MIB,
                &[100 * MIB, 100 * MIB, 10 * MIB],
                vec![50 * MIB, 30 * MIB, 0],
            ),
            (0, &[100 * MIB], vec![0]),
        ];
        for (want, usage, expect) in cases {
            assert_eq!(
                share(want, usage, 64 * MIB),
                expect,
                "{want} over {usage:?}"
            );
        }
    }
}
