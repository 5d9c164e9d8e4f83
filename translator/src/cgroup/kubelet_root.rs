//! The kubelet's `cgroupRoot` (`--cgroup-root`, `cgroupRoot:` in its config): the cgroup its
//! `kubepods` tree is created under. `/` on most nodes; kind runs its kubelet with `/kubelet`.
//!
//! Pure. The value is taken in the form the kubelet takes it (cgroupfs notation, whatever the
//! driver) and split into names the way the kubelet does (`ParseCgroupfsToCgroupName`):
//! [`super::layout::Layout`] turns the names into directories for either driver.

use std::fmt;

/// At most this many names: real roots are one level (`/kubelet`) or two; a longer value is
/// more likely a pasted hierarchy path (`/sys/fs/cgroup/...`) than a cgroupRoot.
pub const MAX_LEVELS: usize = 4;

/// A validated kubelet cgroupRoot: `/`, or absolute names without `.`, `..` or empty parts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KubeletRoot {
    parts: Vec<String>,
}

/// The message follows clap's "invalid value '...' for '--kubelet-cgroup-root ...'", which
/// names the flag and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{why}; expected the kubelet's cgroupRoot as its config says it: `/` or \
     `/name[/name...]` with at most {MAX_LEVELS} names, e.g. `/kubelet`"
)]
pub struct KubeletRootError {
    pub value: String,
    pub why: &'static str,
}

impl KubeletRoot {
    /// The kubelet's default: `kubepods` directly under the hierarchy root.
    pub fn top() -> Self {
        Self::default()
    }

    pub fn parse(value: &str) -> Result<Self, KubeletRootError> {
        let err = |why| KubeletRootError {
            value: value.to_owned(),
            why,
        };
        let Some(rest) = value.strip_prefix('/') else {
            return Err(err("not absolute"));
        };
        if rest.is_empty() {
            return Ok(Self::top());
        }
        let mut parts = Vec::new();
        for part in rest.split('/') {
            match part {
                "" => return Err(err("has an empty name (`//` or a trailing `/`)")),
                "." | ".." => return Err(err("has a `.` or `..` name")),
                p if p.chars().any(char::is_control) => {
                    return Err(err("has a control character"));
                }
                p => parts.push(p.to_owned()),
            }
        }
        if parts.len() > MAX_LEVELS {
            return Err(err("has too many names"));
        }
        Ok(Self { parts })
    }

    /// Built from names found on disk (detection); `None` when they do not form a valid root.
    pub fn from_parts<S: AsRef<str>>(parts: &[S]) -> Option<Self> {
        if parts.iter().any(|p| p.as_ref().is_empty()) {
            return None;
        }
        let mut text = String::new();
        for p in parts {
            text.push('/');
            text.push_str(p.as_ref());
        }
        if text.is_empty() {
            return Some(Self::top());
        }
        Self::parse(&text).ok()
    }

    /// The names below the hierarchy root (empty for `/`).
    pub fn parts(&self) -> &[String] {
        &self.parts
    }

    pub fn is_top(&self) -> bool {
        self.parts.is_empty()
    }
}

impl fmt::Display for KubeletRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.parts.is_empty() {
            return f.write_str("/");
        }
        for p in &self.parts {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for KubeletRoot {
    type Err = KubeletRootError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        for (value, parts) in [
            ("/", vec![]),
            ("/kubelet", vec!["kubelet"]),
            ("/kubelet.slice", vec!["kubelet.slice"]),
            ("/a/b", vec!["a", "b"]),
            ("/my-root/x_y", vec!["my-root", "x_y"]),
            ("/a/b/c/d", vec!["a", "b", "c", "d"]),
        ] {
            let root = KubeletRoot::parse(value).expect(value);
            assert_eq!(root.parts(), parts.as_slice(), "{value}");
            assert_eq!(root.to_string(), value, "round trip");
            assert_eq!(root.is_top(), value == "/");
        }
    }

    #[test]
    fn refused_forms_say_why_and_the_form() {
        for (value, why) in [
            ("", "not absolute"),
            ("kubelet", "not absolute"),
            ("./kubelet", "not absolute"),
            ("//kubelet", "empty name"),
            ("/kubelet/", "empty name"),
            ("/a//b", "empty name"),
            ("/kubelet/..", "`..`"),
            ("/../etc", "`..`"),
            ("/a/./b", "`.`"),
            ("/a\nb", "control character"),
            ("/a/b/c/d/e", "too many names"),
        ] {
            let e = KubeletRoot::parse(value).expect_err(value).to_string();
            assert!(e.contains(why), "{value:?}: {e}");
            assert!(e.contains("`/name[/name...]`"), "{e}");
        }
    }

    #[test]
    fn from_parts_validates() {
        assert_eq!(
            KubeletRoot::from_parts::<&str>(&[]),
            Some(KubeletRoot::top())
        );
        assert_eq!(
            KubeletRoot::from_parts(&["kubelet"]).map(|r| r.to_string()),
            Some("/kubelet".to_owned())
        );
        assert_eq!(KubeletRoot::from_parts(&[".."]), None);
        assert_eq!(KubeletRoot::from_parts(&[""]), None);
    }
}
