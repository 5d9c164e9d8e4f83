//! How to recognise a desired value in what the kernel reads back from a knob file. Pure: the
//! writer compares with it before writing, so an unchanged knob is never written.

use koord_api::knobs;

/// How to recognise the desired value in what the kernel reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The same integer.
    Int(i64),
    /// The same number of 4 KiB pages, rounded either way: memcg stores pages, so an unaligned
    /// byte value never reads back verbatim.
    Bytes(i64),
    /// `max`, or a v1 value at or above the page-aligned i64::MAX.
    Unlimited,
    /// `cpu.max`: the quota (`None` = `max`) and period.
    CpuMax { quota: Option<i64>, period: i64 },
}

/// What v1 memcg shows for "unlimited": PAGE_COUNTER_MAX pages of 4 KiB.
pub const V1_UNLIMITED_READBACK: i64 = 0x7FFF_FFFF_FFFF_F000;

const PAGE: i64 = knobs::PAGE_SIZE;

/// Whether `current` (the file's content) already holds the desired value.
pub fn matches(expect: Expect, current: &str) -> bool {
    let current = current.trim();
    match expect {
        Expect::Int(want) => current.parse::<i64>() == Ok(want),
        Expect::Bytes(want) => match current.parse::<i64>() {
            Ok(have) if have == want => true,
            Ok(have) => {
                let floor = want.div_euclid(PAGE) * PAGE;
                let ceil = if floor == want {
                    floor
                } else {
                    floor.saturating_add(PAGE)
                };
                have.rem_euclid(PAGE) == 0 && (have == floor || have == ceil)
            }
            Err(_) => false,
        },
        Expect::Unlimited => {
            current == "max"
                || current == "-1"
                || current
                    .parse::<i64>()
                    .is_ok_and(|v| v >= V1_UNLIMITED_READBACK)
        }
        Expect::CpuMax { quota, period } => {
            let mut parts = current.split_whitespace();
            let q = parts.next();
            let p = parts.next().and_then(|p| p.parse::<i64>().ok());
            let q_ok = match (quota, q) {
                (None, Some("max")) => true,
                (Some(want), Some(q)) => q.parse::<i64>() == Ok(want),
                _ => false,
            };
            q_ok && p == Some(period) && parts.next().is_none()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readback_table() {
        let cases: &[(Expect, &str, bool)] = &[
            (Expect::Unlimited, "9223372036854771712\n", true),
            (Expect::Unlimited, "max\n", true),
            (Expect::Unlimited, "9223372036854775807", true),
            (Expect::Unlimited, "1073741824", false),
            (Expect::Bytes(1_000_000), "999424", true),
            (Expect::Bytes(1_000_000), "1003520", true),
            (Expect::Bytes(1_000_000), "995328", false),
            (Expect::Bytes(104_857_600), "104857600\n", true),
            (Expect::Bytes(104_857_600), "max", false),
            (Expect::Int(-25), "-25\n", true),
            (Expect::Int(0), "", false),
            (Expect::Int(2), "2 ", true),
            (
                Expect::CpuMax {
                    quota: None,
                    period: 100_000,
                },
                "max 100000\n",
                true,
            ),
            (
                Expect::CpuMax {
                    quota: Some(50_000),
                    period: 100_000,
                },
                "50000 100000",
                true,
            ),
            (
                Expect::CpuMax {
                    quota: Some(50_000),
                    period: 100_000,
                },
                "max 100000",
                false,
            ),
            (
                Expect::CpuMax {
                    quota: Some(50_000),
                    period: 100_000,
                },
                "50000 50000",
                false,
            ),
        ];
        for (expect, current, want) in cases {
            assert_eq!(
                matches(*expect, current),
                *want,
                "{expect:?} vs {current:?}"
            );
        }
    }
}
