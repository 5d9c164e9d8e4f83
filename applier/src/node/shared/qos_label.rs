//! A pod's QoS class as its labels say it, for the features that act on BE pods.

use k8s_openapi::api::core::v1::Pod;
use koord_api::keys;

/// Whether the pod is BE by its `koordinator.sh/qosClass` label (else the legacy
/// `alibabacloud.com/qosClass`), as the webhook resolves the class.
pub fn label_is_be(pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    match get(keys::LABEL_QOS_CLASS) {
        Some(v) => v == "BE",
        None => get(keys::LABEL_LEGACY_QOS_CLASS) == Some("BE"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn be_is_the_label_the_webhook_reads() {
        let pod = |labels: &[(&str, &str)]| {
            let mut p = Pod::default();
            p.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            p
        };
        let (label, legacy) = (keys::LABEL_QOS_CLASS, keys::LABEL_LEGACY_QOS_CLASS);
        assert!(label_is_be(&pod(&[(label, "BE")])));
        assert!(label_is_be(&pod(&[(legacy, "BE")])));
        assert!(!label_is_be(&pod(&[(label, "LS")])));
        assert!(!label_is_be(&pod(&[(label, "LS"), (legacy, "BE")])));
        assert!(!label_is_be(&pod(&[])));
        assert!(!label_is_be(&Pod::default()));
    }
}
