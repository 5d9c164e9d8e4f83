//! The BE throttle under node memory pressure: the other half of the Alibaba kernel's positive
//! `memory.wmark_min_adj`, played with mainline's `memory.high`. Pure.
//!
//! On that kernel a BE memcg's allocations are throttled once the node's free memory is below
//! its adjusted min watermark (`min + (low − min) × a / 100`, under kswapd's `low`), so a BE pod
//! cannot push the node into the direct reclaim that would take an LS pod's memory. Reclaim
//! alone ([`super::be_first`]) can take only what the kernel can reclaim (page cache, not
//! anonymous memory without swap); a BE container growing anonymous memory into a full node
//! still wins. So, while free memory is below that point ([`Pressure::Under`]), each BE
//! container's `memory.high` is set to its usage (never lower: the throttle stops growth, the
//! reclaim takes memory): growing further reclaims from the container itself, and what cannot
//! be reclaimed waits in the kernel's `memory.high` penalty — the BE pod pays for its growth,
//! not the LS pod. A node whose page cache keeps free memory between `low` and `high` (any busy
//! node) is not under that point: its BE pods are not throttled, as on that kernel.
//!
//! Bounds and release: the value is never below [`FLOOR`] nor the container's own
//! `memory.min`, never above the value the file held before (that one is kept, and restored),
//! and follows usage down as BE-first reclaims (a container does not grow back into what was
//! taken from it). Once free memory is back at the zones' `high` watermark (kswapd's goal), the
//! value before goes back into the file; between the two points the throttle holds, so a node
//! at the threshold does not flap.

/// Never throttled below this (a small container can still start its work).
pub const FLOOR: u64 = 32 << 20;
/// Lowered or raised only by more than this (one write per real change).
pub const HYSTERESIS: u64 = 4 << 20;

/// The node, as the BE-first worker saw it this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// Free memory (one tick's fall included) is under the Alibaba kernel's throttle point.
    Under,
    /// Between that point and the zones' `high` watermark: hold what is in force.
    Near,
    /// At or above `high`: the throttle goes.
    Clear,
}

/// One BE container this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// `memory.current`.
    pub usage: u64,
    /// The container's `memory.min` (the throttle never goes below its protection).
    pub min: u64,
    /// What `memory.high` held before the throttle (`u64::MAX`: `max`).
    pub prior: u64,
}

/// What to do with one container's `memory.high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Leave,
    /// Write this value (page-aligned).
    Set(u64),
    /// Put the prior value back.
    Release,
}

const PAGE: u64 = koord_api::knobs::PAGE_SIZE.unsigned_abs();

fn page_up(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE).saturating_mul(PAGE)
}

/// The step for one container: `held` is the value in force (`None`: not throttled).
pub fn decide(held: Option<u64>, p: Pressure, s: Seen) -> Decision {
    let base = page_up(s.usage.max(s.min).max(FLOOR));
    match (held, p) {
        (None, Pressure::Under) if base < s.prior => Decision::Set(base),
        (None, _) => Decision::Leave,
        (Some(v), Pressure::Under) if base.saturating_add(HYSTERESIS) < v => Decision::Set(base),
        (Some(_), Pressure::Under | Pressure::Near) => Decision::Leave,
        (Some(_), Pressure::Clear) => Decision::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn seen(usage_mib: u64) -> Seen {
        Seen {
            usage: usage_mib * MIB,
            min: 0,
            prior: u64::MAX,
        }
    }

    #[test]
    fn each_tick_sets_holds_follows_and_releases() {
        use Decision::{Leave, Release, Set};
        use Pressure::{Clear, Near, Under};
        struct Case {
            name: &'static str,
            held: Option<u64>,
            p: Pressure,
            s: Seen,
            want: Decision,
        }
        let cases = [
            Case {
                name: "under the floor: throttled at its usage",
                held: None,
                p: Under,
                s: seen(700),
                want: Set(700 * MIB),
            },
            Case {
                name: "usage mid-page: the next page",
                held: None,
                p: Under,
                s: Seen {
                    usage: 700 * MIB + 1,
                    ..seen(0)
                },
                want: Set(700 * MIB + 4096),
            },
            Case {
                name: "a small container: the floor",
                held: None,
                p: Under,
                s: seen(3),
                want: Set(FLOOR),
            },
            Case {
                name: "never below its own memory.min",
                held: None,
                p: Under,
                s: Seen {
                    min: 100 * MIB,
                    ..seen(50)
                },
                want: Set(100 * MIB),
            },
            Case {
                name: "its own memory.high already lower: nothing to do",
                held: None,
                p: Under,
                s: Seen {
                    prior: 320 * MIB,
                    ..seen(400)
                },
                want: Leave,
            },
            Case {
                name: "near or clear and not throttled: nothing",
                held: None,
                p: Clear,
                s: seen(700),
                want: Leave,
            },
            Case {
                name: "reclaimed while under: follows usage down",
                held: Some(700 * MIB),
                p: Under,
                s: seen(600),
                want: Set(600 * MIB),
            },
            Case {
                name: "a few pages less: no write",
                held: Some(700 * MIB),
                p: Under,
                s: seen(698),
                want: Leave,
            },
            Case {
                name: "between the throttle point and high: held",
                held: Some(600 * MIB),
                p: Near,
                s: seen(600),
                want: Leave,
            },
            Case {
                name: "free memory back at high: released",
                held: Some(300 * MIB),
                p: Clear,
                s: seen(300),
                want: Release,
            },
        ];
        for c in cases {
            assert_eq!(decide(c.held, c.p, c.s), c.want, "{}", c.name);
        }
    }
}
