//! The Secret's keys (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`, the layout cert-manager uses)
//! and the caBundle of the MutatingWebhookConfiguration, read and written.

use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::SelfCertConfig;
use crate::certs::CertKeyPem;
use crate::certs::inspect::{CertInfo, chains_to, inspect_pem};
use crate::certs::rotation::{Stored, Validity};
use crate::tls_config::{PemPair, server_config};

pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

/// The four PEM texts of the Secret, as far as present.
pub struct SecretPems<'a> {
    pub ca_cert: Option<&'a [u8]>,
    pub ca_key: Option<&'a [u8]>,
    pub cert: Option<&'a [u8]>,
    pub key: Option<&'a [u8]>,
}

impl<'a> SecretPems<'a> {
    pub fn of(secret: &'a Secret) -> Self {
        let get = |k: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(k))
                .map(|b| b.0.as_slice())
                .filter(|b| !b.is_empty())
        };
        SecretPems {
            ca_cert: get(CA_CERT),
            ca_key: get(CA_KEY),
            cert: get(TLS_CERT),
            key: get(TLS_KEY),
        }
    }

    /// The serving certificate and key, when both are there.
    pub fn serving(&self) -> Option<PemPair> {
        Some((self.cert?.to_vec(), self.key?.to_vec()))
    }
}

/// The planner's view of the Secret, and the stored CA (PEM and parsed) when it is usable.
pub fn stored_state(
    secret: Option<&Secret>,
    dns_name: &str,
    now: SystemTime,
) -> (Stored, Option<(CertKeyPem, CertInfo)>) {
    let Some(secret) = secret else {
        return (Stored::Missing, None);
    };
    let p = SecretPems::of(secret);
    let (Some(ca_cert), Some(ca_key), Some(cert), Some(key)) = (p.ca_cert, p.ca_key, p.cert, p.key)
    else {
        return (Stored::Missing, None);
    };
    let ca = match inspect_pem(ca_cert) {
        Ok(mut v) if v.first().is_some_and(|c| c.is_ca) => v.remove(0),
        Ok(_) => return (Stored::Unusable(format!("{CA_CERT} is not a CA")), None),
        Err(e) => return (Stored::Unusable(format!("{CA_CERT}: {e}")), None),
    };
    // The CA key must fit the CA certificate, or nothing it signs verifies.
    if let Err(e) = server_config(ca_cert, ca_key) {
        return (Stored::Unusable(format!("{CA_KEY}: {e}")), None);
    }
    let leaf = match inspect_pem(cert) {
        Ok(mut v) if !v.is_empty() => v.remove(0),
        Ok(_) => return (Stored::Unusable(format!("{TLS_CERT} is empty")), None),
        Err(e) => return (Stored::Unusable(format!("{TLS_CERT}: {e}")), None),
    };
    let leaf_fits =
        server_config(cert, key).is_ok() && chains_to(cert, ca_cert, dns_name, now).is_ok();
    let pems = CertKeyPem {
        cert_pem: String::from_utf8_lossy(ca_cert).into_owned(),
        key_pem: String::from_utf8_lossy(ca_key).into_owned(),
    };
    let stored = Stored::Usable {
        ca: Validity::from(&ca),
        leaf: Validity::from(&leaf),
        leaf_fits,
    };
    (stored, Some((pems, ca)))
}

/// The owner reference that has the garbage collector delete the Secret with the
/// MutatingWebhookConfiguration (`kubectl delete -k`, `helm uninstall`), also when the webhook
/// re-created it after the manifests were applied.
fn owner(webhook: &MutatingWebhookConfiguration) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingWebhookConfiguration".into(),
        name: webhook.metadata.name.clone()?,
        uid: webhook.metadata.uid.clone()?,
        ..Default::default()
    })
}

/// The Secret to write: `current` (or a new one) holding the CA and serving certificate.
pub fn with_pems(
    current: Option<&Secret>,
    config: &SelfCertConfig,
    webhook: &MutatingWebhookConfiguration,
    ca: &CertKeyPem,
    leaf: &CertKeyPem,
) -> Secret {
    let mut s = current.cloned().unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(config.secret.clone()),
            namespace: Some(config.namespace.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "koord-webhook".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        ..Default::default()
    });
    let data = s.data.get_or_insert_with(Default::default);
    for (k, v) in [
        (CA_CERT, &ca.cert_pem),
        (CA_KEY, &ca.key_pem),
        (TLS_CERT, &leaf.cert_pem),
        (TLS_KEY, &leaf.key_pem),
    ] {
        data.insert(k.to_owned(), ByteString(v.clone().into_bytes()));
    }
    if let Some(o) = owner(webhook) {
        let refs = s.metadata.owner_references.get_or_insert_with(Vec::new);
        if !refs.iter().any(|r| r.uid == o.uid) {
            refs.push(o);
        }
    }
    s
}

/// The caBundle of each webhook of the configuration (empty when unset).
pub fn published_bundles(webhook: &MutatingWebhookConfiguration) -> Vec<Vec<u8>> {
    webhook
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// The configuration with `bundle` in every webhook's caBundle; `None` when it already is.
pub fn with_bundle(
    webhook: &MutatingWebhookConfiguration,
    bundle: &[u8],
) -> Option<MutatingWebhookConfiguration> {
    if published_bundles(webhook).iter().all(|b| b == bundle) {
        return None;
    }
    let mut next = webhook.clone();
    for w in next.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(ByteString(bundle.to_vec()));
    }
    Some(next)
}
