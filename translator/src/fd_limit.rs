//! The open-file limit (`RLIMIT_NOFILE`): kept knob files, CPI counter groups and the metrics
//! endpoint's connections are all sized from it. rustix's safe calls, no `unsafe`.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft limit in force; `usize::MAX` when unlimited.
pub fn soft_limit() -> usize {
    to_usize(getrlimit(Resource::Nofile).current)
}

/// Raises the soft limit to the hard one (no privilege needed) before anything sizes itself
/// from it, and returns the soft limit now in force (the old one if raising failed).
pub fn raise_to_hard() -> usize {
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => return to_usize(raised.current),
            Err(e) => tracing::warn!(error = %e, "could not raise RLIMIT_NOFILE to its hard limit"),
        }
    }
    to_usize(lim.current)
}

/// `None` is `RLIM_INFINITY`.
fn to_usize(limit: Option<u64>) -> usize {
    limit.map_or(usize::MAX, |v| usize::try_from(v).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_gives_the_hard_limit_and_the_soft_one_follows() {
        let before = soft_limit();
        let hard = to_usize(getrlimit(Resource::Nofile).maximum);
        let after = raise_to_hard();
        assert!(after >= before, "{after} < {before}");
        assert_eq!(after, hard);
        assert_eq!(soft_limit(), after);
        // The kernel's own account agrees (an oracle outside rustix).
        let limits = std::fs::read_to_string("/proc/self/limits").expect("limits");
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("Max open files line");
        let soft = line.split_whitespace().nth(3).expect("soft column");
        let want = if soft == "unlimited" {
            usize::MAX
        } else {
            soft.parse().expect("number")
        };
        assert_eq!(after, want, "{line}");
    }

    #[test]
    fn infinity_is_the_largest_limit() {
        assert_eq!(to_usize(None), usize::MAX);
        assert_eq!(to_usize(Some(1024)), 1024);
    }
}
