//! The kernel's list format (`0-3,8,10-11`) of `cpulist`, `cpuset.cpus`, `Cpus_allowed_list`
//! and `devices/system/cpu/online`: one parser and one printer for memory locality, the
//! collectors and colocation. Pure.

use std::collections::BTreeSet;

/// A set of CPU or node numbers.
pub type IdSet = BTreeSet<u32>;

/// Largest id accepted in a list: bounds memory on hostile input (the kernel's own limits are
/// 8192 CPUs and 1024 nodes).
pub const MAX_ID: u32 = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("{0:?} is not a kernel list (like 0-3,8)")]
    Syntax(String),
    #[error("{0:?}: id above {MAX_ID}")]
    TooLarge(String),
}

/// Parses the kernel list format: comma-separated ids and inclusive ranges, whitespace
/// around it ignored, empty = empty set (an empty `cpuset.cpus` on v2 means "inherit").
pub fn parse_list(text: &str) -> Result<IdSet, ListError> {
    let text = text.trim();
    let mut set = IdSet::new();
    if text.is_empty() {
        return Ok(set);
    }
    let bad = || ListError::Syntax(text.to_owned());
    let num = |s: &str| -> Result<u32, ListError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u64 = s
            .parse()
            .map_err(|_| ListError::TooLarge(text.to_owned()))?;
        if n > u64::from(MAX_ID) {
            return Err(ListError::TooLarge(text.to_owned()));
        }
        Ok(n as u32)
    };
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad());
                }
                set.extend(a..=b);
            }
            None => {
                set.insert(num(part)?);
            }
        }
    }
    Ok(set)
}

/// The kernel list format of `set` (`0-3,8`); empty for the empty set, as the kernel prints an
/// empty `cpuset.cpus`.
pub fn format_list(set: &IdSet) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// [`parse_list`] as a sorted `Vec`; `None` when the text is not a list.
pub fn parse_vec(text: &str) -> Option<Vec<u32>> {
    parse_list(text).ok().map(|set| set.into_iter().collect())
}

/// [`format_list`] of a slice of ids (any order, duplicates allowed).
pub fn format_slice(ids: &[u32]) -> String {
    format_list(&ids.iter().copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> IdSet {
        ids.iter().copied().collect()
    }

    #[test]
    fn list_table() {
        let ok: &[(&str, &[u32])] = &[
            ("", &[]),
            ("\n", &[]),
            ("0", &[0]),
            ("0-3\n", &[0, 1, 2, 3]),
            ("0-1,4,6-7", &[0, 1, 4, 6, 7]),
            ("5,1", &[1, 5]),
            ("3-3", &[3]),
        ];
        for (text, want) in ok {
            assert_eq!(parse_list(text), Ok(set(want)), "{text:?}");
        }
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1 2", "0x1", "+1"] {
            assert!(
                matches!(parse_list(bad), Err(ListError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_list("0-4294967295"),
            Err(ListError::TooLarge(_))
        ));
        assert!(matches!(
            parse_list("99999999999999999999"),
            Err(ListError::TooLarge(_))
        ));
    }

    #[test]
    fn format_round_trips() {
        for (ids, text) in [
            (&[][..], ""),
            (&[0][..], "0"),
            (&[0, 1][..], "0-1"),
            (&[0, 1, 2, 5, 7, 8][..], "0-2,5,7-8"),
        ] {
            assert_eq!(format_list(&set(ids)), text);
            if !text.is_empty() {
                assert_eq!(parse_list(text), Ok(set(ids)));
            }
        }
    }

    #[test]
    fn vec_and_slice_forms() {
        assert_eq!(parse_vec("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_vec(""), Some(vec![]));
        assert_eq!(parse_vec("0-99999999"), None);
        assert_eq!(format_slice(&[3, 1, 2, 2, 8]), "1-3,8");
        assert_eq!(format_slice(&[]), "");
    }
}
