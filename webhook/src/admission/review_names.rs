//! The uid, namespace and pod name an answered review carries for logs, metrics and the
//! namespace check, in one buffer: one allocation per admission instead of three (with the
//! pod's display name written in place, not concatenated first).

/// `uid`, `namespace` and `pod`, back to back in one string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewNames {
    text: String,
    uid_end: usize,
    namespace_end: usize,
}

impl ReviewNames {
    /// `pod` is written from its parts: the concatenation of `pod_parts`.
    pub fn new(uid: &str, namespace: &str, pod_parts: &[&str]) -> Self {
        let pod_len: usize = pod_parts.iter().map(|p| p.len()).sum();
        let mut text = String::with_capacity(uid.len() + namespace.len() + pod_len);
        text.push_str(uid);
        let uid_end = text.len();
        text.push_str(namespace);
        let namespace_end = text.len();
        for part in pod_parts {
            text.push_str(part);
        }
        ReviewNames {
            text,
            uid_end,
            namespace_end,
        }
    }

    /// Only a uid (an answer for a request that names no pod).
    pub fn uid_only(uid: &str) -> Self {
        Self::new(uid, "", &[])
    }

    pub fn uid(&self) -> &str {
        &self.text[..self.uid_end]
    }

    pub fn namespace(&self) -> &str {
        &self.text[self.uid_end..self.namespace_end]
    }

    pub fn pod(&self) -> &str {
        &self.text[self.namespace_end..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_comes_back_as_given() {
        for (uid, ns, parts, pod) in [
            ("u-1", "shop", &["web-", "*"][..], "web-*"),
            ("", "", &[][..], ""),
            ("ü", "ns", &["é"][..], "é"),
            ("uid", "", &["name"][..], "name"),
        ] {
            let n = ReviewNames::new(uid, ns, parts);
            assert_eq!((n.uid(), n.namespace(), n.pod()), (uid, ns, pod));
        }
        assert_eq!(ReviewNames::uid_only("x").uid(), "x");
        assert_eq!(ReviewNames::default().pod(), "");
    }
}
