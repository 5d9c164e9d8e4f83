//! A cgroup v2 file and the text the applier writes into it -> the systemd unit properties
//! that make systemd write the same text. Pure.
//!
//! All are D-Bus `t` (u64); unlimited is `u64::MAX` (systemd's `CGROUP_LIMIT_MAX` and
//! `USEC_INFINITY`):
//!
//! | file | property | how systemd writes it back |
//! |---|---|---|
//! | `memory.min`, `memory.low`, `memory.high`, `memory.max` | `MemoryMin`, `MemoryLow`, `MemoryHigh`, `MemoryMax` | the bytes, `max` for `u64::MAX` |
//! | `cpu.weight` | `CPUWeight` (1..=10000; 0 would be systemd's `idle`) | the weight |
//! | `cpu.max` `"<q> <p>"` | `CPUQuotaPerSecUSec` = ceil(q x 1e6 / p), and `CPUQuotaPeriodUSec` = p when p is not systemd's default 100 ms | `max(ps x p / 1e6, 1000) p`, which is q again for q >= 1000 µs (the kernel's minimum) and p in 1 ms..=1 s |
//! | `cpu.max` `"max 100000"` | `CPUQuotaPerSecUSec` = `u64::MAX` | `max 100000` (systemd always uses its default period without a quota) |
//!
//! Any other file has no property of ours (`memory.oom.group`, `cpu.idle`, the Alibaba knobs):
//! it is written as a file, as on the cgroupfs driver (if systemd rewrote one while applying a
//! call, the next pass finds it and writes it again, without a call).

/// `CPUQuotaPeriodUSec` systemd uses when none is set (`CGROUP_CPU_QUOTA_DEFAULT_PERIOD_USEC`).
pub const DEFAULT_PERIOD_US: u64 = 100_000;
/// systemd's "no limit" for every property here.
pub const INFINITY: u64 = u64::MAX;

const USEC_PER_SEC: u64 = 1_000_000;

/// One property as `SetUnitProperties` takes it: a name and a `t` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Property {
    pub name: &'static str,
    pub value: u64,
}

/// What a file write becomes on a systemd unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// Set these properties; systemd then writes the text itself and keeps it.
    Properties(Vec<Property>),
    /// The applier sets no property for the file (none of systemd's stands for it): written as
    /// a file only, as on the cgroupfs driver.
    NotSystemd,
    /// systemd has the property but cannot say this value (why): written as a file only, and
    /// systemd's next re-apply of the unit may undo it.
    Inexpressible(String),
}

fn prop(name: &'static str, value: u64) -> Property {
    Property { name, value }
}

/// The property name of a memory file.
fn memory_property(file: &str) -> Option<&'static str> {
    Some(match file {
        "memory.min" => "MemoryMin",
        "memory.low" => "MemoryLow",
        "memory.high" => "MemoryHigh",
        "memory.max" => "MemoryMax",
        "memory.swap.max" => "MemorySwapMax",
        _ => return None,
    })
}

/// Maps the v2 file `file` holding `text` (as the applier writes it).
pub fn map(file: &str, text: &str) -> Mapped {
    let text = text.trim();
    let bad = |why: &str| Mapped::Inexpressible(format!("{file} {text:?}: {why}"));
    if let Some(name) = memory_property(file) {
        return match text {
            "max" => Mapped::Properties(vec![prop(name, INFINITY)]),
            t => match t.parse::<u64>() {
                Ok(v) => Mapped::Properties(vec![prop(name, v)]),
                Err(_) => bad("not a byte count or max"),
            },
        };
    }
    match file {
        "cpu.weight" => match text.parse::<u64>() {
            Ok(w @ 1..=10_000) => Mapped::Properties(vec![prop("CPUWeight", w)]),
            _ => bad("not a weight in 1..=10000"),
        },
        "cpu.max" => cpu_max(text).unwrap_or_else(bad),
        _ => Mapped::NotSystemd,
    }
}

fn cpu_max(text: &str) -> Result<Mapped, &'static str> {
    let mut parts = text.split_whitespace();
    let (Some(quota), period, None) = (parts.next(), parts.next(), parts.next()) else {
        return Err("not `<quota|max> <period>`");
    };
    let period = match period {
        None => DEFAULT_PERIOD_US,
        Some(p) => p.parse::<u64>().map_err(|_| "the period is not a number")?,
    };
    if !(1_000..=USEC_PER_SEC).contains(&period) {
        return Err("systemd keeps the period within 1 ms..=1 s");
    }
    if quota == "max" {
        return if period == DEFAULT_PERIOD_US {
            Ok(Mapped::Properties(vec![prop(
                "CPUQuotaPerSecUSec",
                INFINITY,
            )]))
        } else {
            Err("without a quota systemd always writes its default period, 100000")
        };
    }
    let q: u64 = quota.parse().map_err(|_| "the quota is not a number")?;
    if q < 1_000 {
        return Err("systemd writes at least 1000 µs of quota");
    }
    let per_sec = q
        .checked_mul(USEC_PER_SEC)
        .map(|v| v.div_ceil(period))
        .ok_or("the quota is too large")?;
    let mut props = vec![prop("CPUQuotaPerSecUSec", per_sec)];
    if period != DEFAULT_PERIOD_US {
        props.push(prop("CPUQuotaPeriodUSec", period));
    }
    Ok(Mapped::Properties(props))
}

/// The `cpu.max` text systemd writes for a quota per second and a period (systemd 252,
/// `cgroup_apply_unified_cpu_quota` after `cgroup_cpu_adjust_period`), for the table test.
#[cfg(test)]
fn systemd_cpu_max(per_sec: u64, period: Option<u64>) -> String {
    const USEC_PER_MSEC: u64 = 1_000;
    if per_sec == INFINITY {
        return format!("max {DEFAULT_PERIOD_US}");
    }
    let period = period.unwrap_or(DEFAULT_PERIOD_US);
    let period = period
        .max(USEC_PER_MSEC)
        .max(USEC_PER_MSEC * USEC_PER_SEC / per_sec)
        .min(USEC_PER_SEC);
    let quota = (per_sec * period / USEC_PER_SEC).max(USEC_PER_MSEC);
    format!("{quota} {period}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(v: &[(&'static str, u64)]) -> Mapped {
        Mapped::Properties(v.iter().map(|&(n, v)| prop(n, v)).collect())
    }

    #[test]
    fn map_table() {
        let cases: Vec<(&str, &str, Mapped)> = vec![
            (
                "memory.min",
                "134217728",
                props(&[("MemoryMin", 134_217_728)]),
            ),
            ("memory.low", "0", props(&[("MemoryLow", 0)])),
            ("memory.high", "max", props(&[("MemoryHigh", INFINITY)])),
            ("memory.swap.max", "0", props(&[("MemorySwapMax", 0)])),
            (
                "memory.max",
                "536870912\n",
                props(&[("MemoryMax", 536_870_912)]),
            ),
            ("cpu.weight", "1", props(&[("CPUWeight", 1)])),
            ("cpu.weight", "10000", props(&[("CPUWeight", 10_000)])),
            (
                "cpu.max",
                "50000 100000",
                props(&[("CPUQuotaPerSecUSec", 500_000)]),
            ),
            (
                "cpu.max",
                "max 100000",
                props(&[("CPUQuotaPerSecUSec", INFINITY)]),
            ),
            (
                "cpu.max",
                "1000 100000",
                props(&[("CPUQuotaPerSecUSec", 10_000)]),
            ),
            (
                "cpu.max",
                "25000 50000",
                props(&[
                    ("CPUQuotaPerSecUSec", 500_000),
                    ("CPUQuotaPeriodUSec", 50_000),
                ]),
            ),
            (
                "cpu.max",
                "33333 70000",
                props(&[
                    ("CPUQuotaPerSecUSec", 476_186),
                    ("CPUQuotaPeriodUSec", 70_000),
                ]),
            ),
            // No property of ours: a plain file.
            ("memory.oom.group", "1", Mapped::NotSystemd),
            ("cpu.idle", "0", Mapped::NotSystemd),
            ("memory.wmark_ratio", "95", Mapped::NotSystemd),
        ];
        for (file, text, want) in cases {
            assert_eq!(map(file, text), want, "{file} {text:?}");
        }
        for (file, text) in [
            ("cpu.weight", "0"),
            ("cpu.weight", "10001"),
            ("cpu.max", "500 100000"),
            ("cpu.max", "max 50000"),
            ("cpu.max", "50000 2000000"),
            ("cpu.max", "x 100000"),
            ("cpu.max", "1 2 3"),
            ("memory.min", "-1"),
        ] {
            assert!(
                matches!(map(file, text), Mapped::Inexpressible(_)),
                "{file} {text:?}"
            );
        }
    }

    /// Every quota the applier writes (1 ms and more, periods 1 ms..=1 s) comes back from
    /// systemd as the same `cpu.max` text.
    #[test]
    fn cpu_max_round_trips_through_systemd() {
        for period in [
            1_000u64, 10_000, 50_000, 70_000, 100_000, 333_333, 1_000_000,
        ] {
            for quota in [
                1_000u64, 1_001, 7_919, 33_333, 50_000, 100_000, 1_234_567, 64_000_000,
            ] {
                let text = format!("{quota} {period}");
                let Mapped::Properties(p) = map("cpu.max", &text) else {
                    panic!("{text} not mapped");
                };
                let per_sec = p[0].value;
                let sd_period = p.get(1).map(|p| p.value);
                assert_eq!(systemd_cpu_max(per_sec, sd_period), text, "{p:?}");
            }
        }
        let Mapped::Properties(p) = map("cpu.max", "max 100000") else {
            panic!("max not mapped");
        };
        assert_eq!(systemd_cpu_max(p[0].value, None), "max 100000");
    }
}
