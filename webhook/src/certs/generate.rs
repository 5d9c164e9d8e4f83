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

/// How far `notBefore` is set back: a node with a slightly slow clock still accepts a fresh
/// certificate. The rotation plan adds it back to know when a certificate was made.
pub const BACKDATE: Duration = Duration::from_secs(3600);

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// Valid from now (backdated) for `lifetime`, but never past `cap` (a serving certificate
/// outliving its CA would stop verifying when the CA expires).
fn validity(params: &mut CertificateParams, lifetime: Duration, cap: Option<SystemTime>) {
    let now = SystemTime::now();
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let mut not_after = now.checked_add(lifetime).unwrap_or(now);
    if let Some(cap) = cap {
        not_after = not_after.min(cap);
    }
    params.not_before = not_before.into();
    params.not_after = not_after.into();
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "koord-webhook");
    dn
}

fn serving_params(
    sans: Vec<String>,
    lifetime: Duration,
    cap: Option<SystemTime>,
) -> Result<CertificateParams, GenerateError> {
    let common_name = sans
        .first()
        .cloned()
        .unwrap_or_else(|| "koord-webhook".into());
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name = name(&common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, lifetime, cap);
    Ok(params)
}

fn ca_params(lifetime: Duration) -> CertificateParams {
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("koord-webhook-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca_params, lifetime, None);
    ca_params
}

/// A self-signed CA valid for `lifetime`.
pub fn generate_ca(lifetime: Duration) -> Result<CertKeyPem, GenerateError> {
    let key = KeyPair::generate()?;
    let cert = ca_params(lifetime).self_signed(&key)?;
    Ok(CertKeyPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A serving certificate for `sans`, signed by the CA `ca` (PEM certificate and key), valid
/// for `lifetime` but not past `cap` (the CA's own expiry).
pub fn sign_serving(
    ca: &CertKeyPem,
    sans: Vec<String>,
    lifetime: Duration,
    cap: Option<SystemTime>,
) -> Result<CertKeyPem, GenerateError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let cert = serving_params(sans, lifetime, cap)?.signed_by(&key, &issuer)?;
    Ok(CertKeyPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A CA valid for `ca_days` and a serving certificate for `sans` (DNS names or IPs) valid for
/// `days`, signed by it.
pub fn generate_bundle(
    sans: Vec<String>,
    days_valid: u32,
    ca_days: u32,
) -> Result<CertBundle, GenerateError> {
    let ca = generate_ca(days(ca_days))?;
    let cert = sign_serving(&ca, sans, days(days_valid), None)?;
    Ok(CertBundle {
        ca_cert_pem: ca.cert_pem,
        ca_key_pem: ca.key_pem,
        cert_pem: cert.cert_pem,
        key_pem: cert.key_pem,
    })
}

/// A self-signed serving certificate (standalone mode: nobody needs to trust it in advance).
pub fn self_signed(sans: Vec<String>, days_valid: u32) -> Result<CertKeyPem, GenerateError> {
    let key = KeyPair::generate()?;
    let cert = serving_params(sans, days(days_valid), None)?.self_signed(&key)?;
    Ok(CertKeyPem {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
