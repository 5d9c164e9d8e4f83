//! A pod as the API server stores it, read lean: the page of a list, and per pod what the
//! re-resolver needs besides the engine's [`PodInput`] (which object it is, which version, and
//! whether it is still worth writing to).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::resolve::pod_input::Text;

/// One page of `GET /api/v1/namespaces/{ns}/pods?limit=N`: the items stay unparsed until each
/// is planned, so a page costs its bytes and nothing more.
#[derive(Debug, Deserialize)]
pub struct PodListPage<'a> {
    #[serde(borrow, default)]
    pub metadata: ListMeta<'a>,
    #[serde(borrow, default)]
    pub items: Vec<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListMeta<'a> {
    /// The token of the next page; absent or empty on the last one.
    #[serde(borrow, default, rename = "continue")]
    pub continue_token: Option<Text<'a>>,
}

impl PodListPage<'_> {
    pub fn next_page(&self) -> Option<&str> {
        self.metadata
            .continue_token
            .as_deref()
            .filter(|t| !t.is_empty())
    }
}

/// Identity, version and lifecycle of a stored pod.
#[derive(Debug, Default, Deserialize)]
pub struct StoredMeta<'a> {
    #[serde(borrow, default)]
    pub metadata: IdentityIn<'a>,
    #[serde(borrow, default)]
    pub status: Option<PhaseIn<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct IdentityIn<'a> {
    #[serde(borrow, default)]
    pub name: Text<'a>,
    #[serde(borrow, default)]
    pub namespace: Text<'a>,
    #[serde(borrow, default)]
    pub uid: Text<'a>,
    #[serde(borrow, default, rename = "resourceVersion")]
    pub resource_version: Text<'a>,
    #[serde(borrow, default, rename = "deletionTimestamp")]
    pub deletion_timestamp: Option<Text<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PhaseIn<'a> {
    #[serde(borrow, default)]
    pub phase: Option<Text<'a>>,
}

/// Which pod, at which version: what a patch addresses and an Event regards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

impl StoredMeta<'_> {
    pub fn pod_ref(&self) -> PodRef {
        PodRef {
            namespace: self.metadata.namespace.to_string(),
            name: self.metadata.name.to_string(),
            uid: self.metadata.uid.to_string(),
            resource_version: self.metadata.resource_version.to_string(),
        }
    }

    /// Why a write to this pod would be wasted: it is being deleted, or it has finished (its
    /// cgroups are gone, no node reads its annotation again).
    pub fn not_worth_writing(&self) -> Option<&'static str> {
        if self.metadata.deletion_timestamp.is_some() {
            return Some("terminating");
        }
        match self.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded" | "Failed") => Some("finished"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_items_raw_and_names_the_next_page() {
        let text = r#"{"kind":"PodList","metadata":{"resourceVersion":"9","continue":"abc"},
            "items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let page: PodListPage<'_> = serde_json::from_str(text).expect("page");
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.next_page(), Some("abc"));
        let last: PodListPage<'_> =
            serde_json::from_str(r#"{"metadata":{"continue":""},"items":[]}"#).expect("last");
        assert_eq!(last.next_page(), None);
    }

    #[test]
    fn finished_and_terminating_pods_are_not_worth_writing() {
        for (text, want) in [
            (
                r#"{"metadata":{"name":"a"},"status":{"phase":"Running"}}"#,
                None,
            ),
            (
                r#"{"metadata":{"name":"a"},"status":{"phase":"Pending"}}"#,
                None,
            ),
            (r#"{"metadata":{"name":"a"}}"#, None),
            (
                r#"{"metadata":{"name":"a"},"status":{"phase":"Succeeded"}}"#,
                Some("finished"),
            ),
            (
                r#"{"metadata":{"name":"a"},"status":{"phase":"Failed"}}"#,
                Some("finished"),
            ),
            (
                r#"{"metadata":{"name":"a","deletionTimestamp":"2026-01-01T00:00:00Z"},"status":{"phase":"Running"}}"#,
                Some("terminating"),
            ),
        ] {
            let meta: StoredMeta<'_> = serde_json::from_str(text).expect("meta");
            assert_eq!(meta.not_worth_writing(), want, "{text}");
        }
    }
}
