//! A Kubernetes Event about one pod, as every feature produces it and the Event sink posts it.
//! Pure, and a leaf: the feature modules that word Events depend on it, never the other way.

/// The API server rejects Event notes over 1 KiB.
pub const MAX_NOTE: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An Event about one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodEvent {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub kind: EventKind,
    pub reason: &'static str,
    pub message: String,
}

/// Cuts a note to what the API server accepts, on a character boundary, ending in `...`.
pub fn truncate_note(mut s: String) -> String {
    if s.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_1k() {
        let s = truncate_note("é".repeat(1000));
        assert!(s.len() <= MAX_NOTE && s.ends_with("..."));
        assert_eq!(truncate_note("short".to_owned()), "short");
    }
}
