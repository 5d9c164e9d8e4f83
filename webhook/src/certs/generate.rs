//! Certificate generation with rcgen: a CA and a serving certificate it signs, or one
//! self-signed serving certificate. ECDSA P-256 keys (see the module docs of [`super`]).

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// PEM texts of a CA and a serving certificate it signed.
#[derive(Debug, Clone)]
pub struct CertBundle {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A PEM certificate and its key.
#[derive(Debug, Clone)]
pub struct CertKeyPem {
    pub cert_pem: String,
    pub key_pem: String,
}

#[derive(Debug, thiserror::Error)]
#[error("certificate generation failed: {0}")]
pub struct GenerateError(#[from] rcgen::Error);

/// The DNS names clients use for a Service: `name`, `name.ns`, `name.ns.svc`,
/// `name.ns.svc.cluster.local` (kube-apiserver calls `name.ns.svc`).
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

fn validity(params: &mut CertificateParams, days: u32) {
    // Backdated an hour so a node with a slightly slow clock accepts a fresh certificate.
    let now = SystemTime::now();
    let not_before = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
    let not_after = now
        .checked_add(Duration::from_secs(u64::from(days) * 86_400))
        .unwrap_or(now);
    params.not_before = not_before.into();
    params.not_after = not_after.into();
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "koord-webhook");
    dn
}

fn serving_params(sans: Vec<String>, days: u32) -> Result<CertificateParams, GenerateError> {
    let common_name = sans
        .first()
        .cloned()
        .unwrap_or_else(|| "koord-webhook".into());
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name = name(&common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    Ok(params)
}

/// A CA valid for `ca_days` and a serving certificate for `sans` (DNS names or IPs) valid for
/// `days`, signed by it.
pub fn generate_bundle(
    sans: Vec<String>,
    days: u32,
    ca_days: u32,
) -> Result<CertBundle, GenerateError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("koord-webhook-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca_params, ca_days);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let cert = serving_params(sans, days)?.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A self-signed serving certificate (standalone mode: nobody needs to trust it in advance).
pub fn self_signed(sans: Vec<String>, days: u32) -> Result<CertKeyPem, GenerateError> {
    let key = KeyPair::generate()?;
    let cert = serving_params(sans, days)?.self_signed(&key)?;
    Ok(CertKeyPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
