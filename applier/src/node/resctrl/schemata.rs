//! Resctrl schemata arithmetic (pure): the L3 way mask of a class from `info/L3/cbm_mask` and its
//! start..end percentages, the MBA percentage rounded to the hardware granularity, and the
//! schemata text for every cache domain.

use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemataError {
    #[error("info/L3/cbm_mask {0:?} is not a hexadecimal bit mask")]
    BadMask(String),
    #[error("info/L3/cbm_mask {0:#x} is not one contiguous block of ways")]
    NotContiguous(u64),
    #[error("cache range {start}%..{end}% is empty (allowed 0 <= start < end <= 100)")]
    BadRange { start: i64, end: i64 },
    #[error("schemata line {0:?} is not `L3:<id>=<mask>;...` or `MB:<id>=<percent>;...`")]
    BadLine(String),
}

/// Parses `info/L3/cbm_mask` (e.g. `7ff`) and checks that its ways are contiguous, as x86 CAT
/// requires of every mask.
pub fn parse_cbm_mask(text: &str) -> Result<u64, SchemataError> {
    let mask = u64::from_str_radix(text.trim(), 16)
        .map_err(|_| SchemataError::BadMask(text.trim().to_owned()))?;
    if mask == 0 || mask.count_ones() != 64 - mask.leading_zeros() - mask.trailing_zeros() {
        return Err(SchemataError::NotContiguous(mask));
    }
    Ok(mask)
}

/// The class's ways: `[floor(ways*start%), floor(ways*end%))`, at least `min_bits` ways wide and
/// never past the last way. An 11-way `7ff` at 0..30% gives the lowest 3 ways, `7`.
pub fn l3_way_mask(
    cbm_mask: u64,
    start_percent: i64,
    end_percent: i64,
    min_bits: u32,
) -> Result<u64, SchemataError> {
    if !(0..100).contains(&start_percent) || end_percent <= start_percent || end_percent > 100 {
        return Err(SchemataError::BadRange {
            start: start_percent,
            end: end_percent,
        });
    }
    let first = cbm_mask.trailing_zeros();
    let ways = i64::from(cbm_mask.count_ones());
    let mut start = ways * start_percent / 100;
    let mut end = ways * end_percent / 100;
    let min = i64::from(min_bits.max(1));
    if end - start < min {
        end = (start + min).min(ways);
        start = (end - min).max(0);
    }
    let width = u32::try_from(end - start).unwrap_or(0);
    let low = u32::try_from(start).unwrap_or(0) + first;
    let bits = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    Ok((bits << low) & cbm_mask)
}

/// MBA percentage rounded up to the hardware granularity and at least its minimum.
pub fn mba_value(percent: i64, granularity: i64, min_bandwidth: i64) -> i64 {
    let gran = granularity.max(1);
    let rounded = (percent.clamp(1, 100) + gran - 1) / gran * gran;
    rounded.clamp(min_bandwidth.max(1), 100)
}

/// The cache domains of the machine, read from the root group's schemata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Domains {
    pub l3: Vec<u32>,
    pub mb: Vec<u32>,
}

/// Reads the domain ids from a schemata text such as `L3:0=7ff;1=7ff\nMB:0=100;1=100\n`.
pub fn parse_domains(schemata: &str) -> Result<Domains, SchemataError> {
    let mut d = Domains::default();
    for line in schemata.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (resource, rest) = line
            .split_once(':')
            .ok_or_else(|| SchemataError::BadLine(line.to_owned()))?;
        let target = match resource.trim() {
            "L3" => &mut d.l3,
            "MB" => &mut d.mb,
            _ => continue, // L2, L3CODE/L3DATA (CDP), SMBA: not managed here
        };
        for entry in rest.split(';').filter(|e| !e.trim().is_empty()) {
            let id = entry
                .split_once('=')
                .and_then(|(id, _)| id.trim().parse::<u32>().ok())
                .ok_or_else(|| SchemataError::BadLine(line.to_owned()))?;
            target.push(id);
        }
    }
    Ok(d)
}

/// The schemata text of a class group: one `L3` line (when CAT exists) and one `MB` line (when
/// MBA exists), every domain set to the same value.
pub fn render_schemata(domains: &Domains, l3_mask: Option<u64>, mba: Option<i64>) -> String {
    let mut out = String::new();
    if let Some(mask) = l3_mask.filter(|_| !domains.l3.is_empty()) {
        let entries: Vec<String> = domains
            .l3
            .iter()
            .map(|id| format!("{id}={mask:x}"))
            .collect();
        let _ = writeln!(out, "L3:{}", entries.join(";"));
    }
    if let Some(mba) = mba.filter(|_| !domains.mb.is_empty()) {
        let entries: Vec<String> = domains.mb.iter().map(|id| format!("{id}={mba}")).collect();
        let _ = writeln!(out, "MB:{}", entries.join(";"));
    }
    out
}

/// Whether the kernel's schemata (which lists every resource, padded) already holds `wanted`.
pub fn schemata_matches(current: &str, wanted: &str) -> bool {
    let norm = |l: &str| -> Option<(String, Vec<(u32, String)>)> {
        let (res, rest) = l.trim().split_once(':')?;
        let mut entries: Vec<(u32, String)> = rest
            .split(';')
            .filter_map(|e| {
                let (id, v) = e.split_once('=')?;
                Some((
                    id.trim().parse().ok()?,
                    v.trim().trim_start_matches('0').to_owned(),
                ))
            })
            .collect();
        entries.sort();
        Some((res.trim().to_owned(), entries))
    };
    let current: Vec<_> = current.lines().filter_map(norm).collect();
    wanted
        .lines()
        .filter_map(norm)
        .all(|w| current.contains(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn way_masks() {
        // (cbm_mask, start%, end%, min_bits, expected)
        let cases = [
            ("7ff", 0, 30, 1, 0x7),
            ("7ff", 0, 100, 1, 0x7ff),
            ("7ff", 10, 50, 1, 0x1e),
            ("3ff", 10, 80, 1, 0xfe),
            ("fffff", 0, 30, 1, 0x3f),
            ("7ff", 0, 5, 2, 0x3),
            ("7ff", 99, 100, 2, 0x600),
            ("ff0", 0, 50, 1, 0xf0),
        ];
        for (mask, start, end, min, expected) in cases {
            let cbm = parse_cbm_mask(mask).expect("mask");
            assert_eq!(
                l3_way_mask(cbm, start, end, min).expect("range"),
                expected,
                "{mask} {start}..{end} min {min}"
            );
        }
    }

    #[test]
    fn bad_masks_and_ranges() {
        assert_eq!(
            parse_cbm_mask("xyz"),
            Err(SchemataError::BadMask("xyz".into()))
        );
        assert_eq!(parse_cbm_mask("5"), Err(SchemataError::NotContiguous(5)));
        assert!(parse_cbm_mask("0").is_err());
        assert!(l3_way_mask(0x7ff, 30, 30, 1).is_err());
        assert!(l3_way_mask(0x7ff, -1, 30, 1).is_err());
        assert!(l3_way_mask(0x7ff, 0, 101, 1).is_err());
    }

    #[test]
    fn mba_granularity() {
        for (pct, gran, min, expected) in [
            (100, 10, 10, 100),
            (30, 10, 10, 30),
            (35, 10, 10, 40),
            (5, 10, 10, 10),
            (1, 1, 1, 1),
            (0, 10, 10, 10),
        ] {
            assert_eq!(mba_value(pct, gran, min), expected, "{pct} {gran} {min}");
        }
    }

    #[test]
    fn domains_and_rendering() {
        let root = "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n";
        let d = parse_domains(root).expect("domains");
        assert_eq!(
            d,
            Domains {
                l3: vec![0, 1],
                mb: vec![0, 1]
            }
        );
        let s = render_schemata(&d, Some(0x7), Some(50));
        assert_eq!(s, "L3:0=7;1=7\nMB:0=50;1=50\n");
        assert!(schemata_matches(
            "    L3:0=007;1=007\n    MB:0= 50;1= 50\n",
            &s
        ));
        assert!(!schemata_matches(root, &s));
        assert_eq!(
            render_schemata(
                &Domains {
                    l3: vec![0],
                    mb: vec![]
                },
                Some(0x3),
                Some(50)
            ),
            "L3:0=3\n"
        );
        assert!(parse_domains("garbage").is_err());
    }
}
