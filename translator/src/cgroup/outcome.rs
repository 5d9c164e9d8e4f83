//! What happened to one knob: the outcome the writer reports and the report, the Events and the
//! metrics show. Pure.

use serde::Serialize;

/// What happened to one knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The file held another value and now holds ours (or would, in a dry run).
    Written,
    /// The file already held the value: nothing written.
    Unchanged,
    /// The cgroup directory exists but the file does not: this kernel lacks the knob.
    Unsupported,
    /// The cgroup directory does not exist (yet, or any more): retried at the next pass.
    Missing,
    /// Not attempted: the pod was refused.
    Refused,
    /// The kernel refused the write of a CFS quota (`EINVAL`) because an ancestor's quota is
    /// lower (BE suppression on the BE parent): not a failure; written once the ancestor allows.
    Held,
    /// The kernel refused the read or the write.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::Unchanged => "unchanged",
            Outcome::Unsupported => "unsupported",
            Outcome::Missing => "missing",
            Outcome::Refused => "refused",
            Outcome::Held => "held",
            Outcome::Failed => "failed",
        }
    }
}
