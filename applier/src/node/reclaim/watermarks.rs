//! The Alibaba kernel's memcg watermarks, computed as that kernel computes them
//! (docs/contract.md, "async reclaim"): `wmark_high = limit × wmark_ratio / 100` and
//! `wmark_low = wmark_high − limit × wmark_scale_factor / 10000`, where the limit is
//! `memory.high` when it is below `memory.max`, else `memory.max`, all in pages as the kernel
//! counts them (so the Alibaba doc's worked example comes out to the byte). Pure.

/// A container's watermarks, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    /// Usage above it starts the background reclaim.
    pub high: u64,
    /// The background reclaim stops below it.
    pub low: u64,
}

/// The memcg page (the contract's, as the pod pass compares in it).
const PAGE: u64 = koord_api::knobs::PAGE_SIZE.unsigned_abs();

/// `wmark_ratio` is a percent of the limit; 0 turns async reclaim off.
pub const RATIO_RANGE: std::ops::RangeInclusive<i64> = 0..=100;
/// `wmark_scale_factor` is in 0.01 % of the limit.
pub const SCALE_FACTOR_RANGE: std::ops::RangeInclusive<i64> = 1..=1000;

impl Watermarks {
    /// The watermarks of a memcg with these limits (`None` = `max`), or `None` when async
    /// reclaim is off (ratio 0), the values are out of the kernel's ranges, or nothing limits
    /// the memcg (the Alibaba kernel's `wmark_high` then reads the maximum and never triggers).
    pub fn of(max: Option<u64>, high: Option<u64>, ratio: i64, scale_factor: i64) -> Option<Self> {
        if ratio == 0
            || !RATIO_RANGE.contains(&ratio)
            || !SCALE_FACTOR_RANGE.contains(&scale_factor)
        {
            return None;
        }
        let limit = match (max, high) {
            (Some(m), Some(h)) => m.min(h),
            (Some(l), None) | (None, Some(l)) => l,
            (None, None) => return None,
        };
        let pages = u128::from(limit / PAGE);
        let high = pages * u128::from(ratio.unsigned_abs()) / 100;
        let gap = pages * u128::from(scale_factor.unsigned_abs()) / 10_000;
        let low = high.saturating_sub(gap);
        let bytes = |p: u128| u64::try_from(p * u128::from(PAGE)).unwrap_or(u64::MAX);
        Some(Self {
            high: bytes(high),
            low: bytes(low),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_watermarks_follow_the_alibaba_formulas() {
        struct Case {
            max: Option<u64>,
            high: Option<u64>,
            ratio: i64,
            scale: i64,
            want: Option<(u64, u64)>,
        }
        let cases = [
            // The Alibaba doc's worked example (limit 1 GiB, ratio 95, scale factor 50).
            Case {
                max: Some(GIB),
                high: None,
                ratio: 95,
                scale: 50,
                want: Some((1_020_051_456, 1_014_685_696)),
            },
            // The reference's default for LS and BE: ratio 95, scale 20.
            Case {
                max: Some(GIB),
                high: None,
                ratio: 95,
                scale: 20,
                want: Some((1_020_051_456, 1_017_905_152)),
            },
            // memory.high below memory.max is the limit.
            Case {
                max: Some(GIB),
                high: Some(GIB / 2),
                ratio: 90,
                scale: 100,
                want: Some((483_180_544, 477_814_784)),
            },
            // memory.high above memory.max: max is the limit.
            Case {
                max: Some(GIB / 2),
                high: Some(GIB),
                ratio: 100,
                scale: 1,
                want: Some((536_870_912, 536_817_664)),
            },
            // Only memory.high limits.
            Case {
                max: None,
                high: Some(GIB),
                ratio: 50,
                scale: 1000,
                want: Some((536_870_912, 429_498_368)),
            },
            // Off, unlimited or out of range: nothing to do.
            Case {
                max: Some(GIB),
                high: None,
                ratio: 0,
                scale: 20,
                want: None,
            },
            Case {
                max: None,
                high: None,
                ratio: 95,
                scale: 20,
                want: None,
            },
            Case {
                max: Some(GIB),
                high: None,
                ratio: 101,
                scale: 20,
                want: None,
            },
            Case {
                max: Some(GIB),
                high: None,
                ratio: -1,
                scale: 20,
                want: None,
            },
            Case {
                max: Some(GIB),
                high: None,
                ratio: 95,
                scale: 0,
                want: None,
            },
            Case {
                max: Some(GIB),
                high: None,
                ratio: 95,
                scale: 1001,
                want: None,
            },
            // A gap wider than wmark_high stops at 0.
            Case {
                max: Some(409_600),
                high: None,
                ratio: 1,
                scale: 1000,
                want: Some((4096, 0)),
            },
        ];
        for c in cases {
            let got = Watermarks::of(c.max, c.high, c.ratio, c.scale).map(|w| (w.high, w.low));
            assert_eq!(
                got, c.want,
                "max {:?} high {:?} ratio {} scale {}",
                c.max, c.high, c.ratio, c.scale
            );
        }
    }
}
