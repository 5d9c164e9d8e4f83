//! A cgroup v2 limit or protection file's text (`memory.max`, `memory.high`, `memory.swap.max`,
//! `memory.min`, `memory.low`): bytes, or `max`.

/// Text that is neither bytes nor `max` (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a byte count or max")]
pub struct NotALimit(pub String);

/// Bytes, or `None` for `max`.
pub fn parse_limit(text: &str) -> Result<Option<u64>, NotALimit> {
    match text.trim() {
        "max" => Ok(None),
        t => t
            .parse::<u64>()
            .map(Some)
            .map_err(|_| NotALimit(t.to_owned())),
    }
}

/// Bytes, `max` as `u64::MAX`; `None` when the text is no limit.
pub fn limit_bytes(text: &str) -> Option<u64> {
    parse_limit(text).ok().map(|v| v.unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_files_read_as_bytes_or_max() {
        assert_eq!(parse_limit("max\n"), Ok(None));
        assert_eq!(parse_limit("268435456\n"), Ok(Some(268_435_456)));
        assert_eq!(parse_limit(" 12k\n"), Err(NotALimit("12k".into())));
        assert!(parse_limit("").is_err());
        assert_eq!(limit_bytes("max\n"), Some(u64::MAX));
        assert_eq!(limit_bytes("4096\n"), Some(4096));
        assert_eq!(limit_bytes("-1"), None);
    }
}
