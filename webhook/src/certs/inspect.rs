//! Reading certificates back: validity and CA flag (x509-parser), the PEM of a bundle, and
//! "does this serving certificate verify against that caBundle" the way kube-apiserver's
//! client checks it (webpki through rustls: signature chain, validity, DNS name).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// One certificate of a PEM text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub der: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub is_ca: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InspectError {
    #[error("not PEM: {0}")]
    Pem(String),
    #[error("no CERTIFICATE block")]
    Empty,
    #[error("not an X.509 certificate: {0}")]
    X509(String),
}

fn time(ts: i64) -> SystemTime {
    match u64::try_from(ts) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH,
    }
}

/// The DER blocks of a PEM text, in order.
pub fn pem_ders(pem: &[u8]) -> Result<Vec<Vec<u8>>, InspectError> {
    let ders = CertificateDer::pem_slice_iter(pem)
        .map(|c| c.map(|c| c.as_ref().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| InspectError::Pem(e.to_string()))?;
    if ders.is_empty() {
        return Err(InspectError::Empty);
    }
    Ok(ders)
}

/// Validity and CA flag of one DER certificate.
pub fn inspect_der(der: &[u8]) -> Result<CertInfo, InspectError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| InspectError::X509(e.to_string()))?;
    let v = cert.validity();
    Ok(CertInfo {
        der: der.to_vec(),
        not_before: time(v.not_before.timestamp()),
        not_after: time(v.not_after.timestamp()),
        is_ca: cert.is_ca(),
    })
}

/// Every certificate of a PEM text.
pub fn inspect_pem(pem: &[u8]) -> Result<Vec<CertInfo>, InspectError> {
    pem_ders(pem)?.iter().map(|d| inspect_der(d)).collect()
}

/// The notAfter of a PEM chain's first (leaf) certificate; `None` when the PEM does not parse.
pub fn leaf_not_after(pem: &[u8]) -> Option<SystemTime> {
    inspect_pem(pem)
        .ok()?
        .into_iter()
        .next()
        .map(|c| c.not_after)
}

/// PEM text of DER certificates (what a caBundle holds).
pub fn to_pem(ders: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in ders {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let text = base64_simd::STANDARD.encode_to_string(der);
        for line in text.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("the caBundle is empty")]
    EmptyBundle,
    #[error("the caBundle: {0}")]
    Bundle(InspectError),
    #[error("the serving certificate: {0}")]
    Leaf(InspectError),
    #[error("{0:?} is not a DNS name")]
    Name(String),
    #[error("does not verify against the caBundle: {0}")]
    Verify(String),
}

/// Ok when the serving certificate (PEM chain, leaf first) verifies for `dns_name` at `now`
/// against the CAs of `bundle_pem`: what kube-apiserver checks before it sends a review.
pub fn chains_to(
    leaf_pem: &[u8],
    bundle_pem: &[u8],
    dns_name: &str,
    now: SystemTime,
) -> Result<(), ChainError> {
    if bundle_pem.iter().all(u8::is_ascii_whitespace) {
        return Err(ChainError::EmptyBundle);
    }
    let mut roots = rustls::RootCertStore::empty();
    for der in pem_ders(bundle_pem).map_err(ChainError::Bundle)? {
        // A block that is not a usable CA is skipped: the others may still verify.
        let _ = roots.add(CertificateDer::from(der));
    }
    let chain = pem_ders(leaf_pem).map_err(ChainError::Leaf)?;
    let (leaf, intermediates) = chain
        .split_first()
        .ok_or(ChainError::Leaf(InspectError::Empty))?;
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|d| CertificateDer::from(d.as_slice()))
        .collect();
    let name = ServerName::try_from(dns_name.to_owned())
        .map_err(|_| ChainError::Name(dns_name.to_owned()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| ChainError::Verify(e.to_string()))?;
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf.as_slice()),
            &intermediates,
            &name,
            &[],
            UnixTime::since_unix_epoch(since_epoch),
        )
        .map(|_| ())
        .map_err(|e| ChainError::Verify(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::generate::{generate_ca, self_signed, sign_serving};

    const DAY: Duration = Duration::from_secs(86_400);
    const NAME: &str = "koord-webhook.koordinator-system.svc";

    fn sans() -> Vec<String> {
        vec![NAME.to_owned()]
    }

    #[test]
    fn chains_to_table() {
        let ca = generate_ca(30 * DAY).expect("ca");
        let other_ca = generate_ca(30 * DAY).expect("ca");
        let leaf = sign_serving(&ca, sans(), 10 * DAY, None).expect("leaf");
        let foreign = self_signed(sans(), 10).expect("self-signed");
        let both = format!("{}{}", other_ca.cert_pem, ca.cert_pem);
        let now = SystemTime::now();
        let later = now + 11 * DAY;
        type Case<'a> = (&'a str, &'a str, &'a str, &'a str, SystemTime, bool);
        let cases: [Case<'_>; 8] = [
            (
                "signed by the bundle's CA",
                &leaf.cert_pem,
                &ca.cert_pem,
                NAME,
                now,
                true,
            ),
            ("old+new bundle", &leaf.cert_pem, &both, NAME, now, true),
            (
                "other CA",
                &leaf.cert_pem,
                &other_ca.cert_pem,
                NAME,
                now,
                false,
            ),
            ("empty bundle", &leaf.cert_pem, "", NAME, now, false),
            (
                "self-signed leaf",
                &foreign.cert_pem,
                &ca.cert_pem,
                NAME,
                now,
                false,
            ),
            (
                "wrong name",
                &leaf.cert_pem,
                &ca.cert_pem,
                "other.ns.svc",
                now,
                false,
            ),
            (
                "expired leaf",
                &leaf.cert_pem,
                &ca.cert_pem,
                NAME,
                later,
                false,
            ),
            (
                "garbage bundle",
                &leaf.cert_pem,
                "not pem",
                NAME,
                now,
                false,
            ),
        ];
        for (what, leaf, bundle, name, at, ok) in cases {
            let got = chains_to(leaf.as_bytes(), bundle.as_bytes(), name, at);
            assert_eq!(got.is_ok(), ok, "{what}: {got:?}");
        }
    }

    #[test]
    fn inspect_reads_validity_and_ca_flag() {
        let ca = generate_ca(30 * DAY).expect("ca");
        let leaf = sign_serving(&ca, sans(), 10 * DAY, None).expect("leaf");
        let ca_info = &inspect_pem(ca.cert_pem.as_bytes()).expect("ca")[0];
        let leaf_info = &inspect_pem(leaf.cert_pem.as_bytes()).expect("leaf")[0];
        assert!(ca_info.is_ca && !leaf_info.is_ca);
        let now = SystemTime::now();
        let left = leaf_info.not_after.duration_since(now).expect("future");
        assert!(
            left > 10 * DAY - Duration::from_secs(60) && left <= 10 * DAY,
            "{left:?}"
        );
        assert!(ca_info.not_before < now);
    }

    #[test]
    fn serving_cert_never_outlives_its_cap() {
        let ca = generate_ca(5 * DAY).expect("ca");
        let cap = inspect_pem(ca.cert_pem.as_bytes()).expect("ca")[0].not_after;
        let leaf = sign_serving(&ca, sans(), 90 * DAY, Some(cap)).expect("leaf");
        assert_eq!(
            inspect_pem(leaf.cert_pem.as_bytes()).expect("leaf")[0].not_after,
            cap
        );
    }

    #[test]
    fn to_pem_round_trips() {
        let a = generate_ca(DAY).expect("ca");
        let b = generate_ca(DAY).expect("ca");
        let ders: Vec<Vec<u8>> = [&a, &b]
            .iter()
            .flat_map(|c| pem_ders(c.cert_pem.as_bytes()).expect("pem"))
            .collect();
        assert_eq!(pem_ders(to_pem(&ders).as_bytes()).expect("pem"), ders);
        assert_eq!(pem_ders(b""), Err(InspectError::Empty));
    }
}
