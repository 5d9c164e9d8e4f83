//! `koord-webhook certs --out DIR --service NAME --namespace NS [--ip IP]...`

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::generate::{CertBundle, GenerateError, generate_bundle, service_dns_names};

#[derive(Debug, Clone, clap::Args)]
pub struct CertsArgs {
    /// Directory for ca.crt, ca.key, tls.crt, tls.key (created if missing).
    #[arg(long, env = "KOORD_CERTS_OUT")]
    pub out: PathBuf,
    /// Name of the webhook Service.
    #[arg(long, env = "KOORD_CERTS_SERVICE", default_value = "koord-webhook")]
    pub service: String,
    /// Namespace of the webhook Service.
    #[arg(
        long,
        env = "KOORD_CERTS_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub namespace: String,
    /// Extra IP SANs (repeatable), e.g. a node IP for a webhook reached by `url:`.
    /// `127.0.0.1` is always included (port-forward and local tests).
    #[arg(long = "ip", env = "KOORD_CERTS_IPS", value_delimiter = ',')]
    pub ips: Vec<IpAddr>,
    /// Validity of the serving certificate, days.
    #[arg(long, env = "KOORD_CERTS_DAYS", default_value_t = 365)]
    pub days: u32,
    /// Validity of the CA, days.
    #[arg(long, env = "KOORD_CERTS_CA_DAYS", default_value_t = 3650)]
    pub ca_days: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error("{path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// The subject alternative names of the serving certificate.
pub fn sans(args: &CertsArgs) -> Vec<String> {
    let mut sans = service_dns_names(&args.service, &args.namespace);
    sans.push("localhost".into());
    let loopback = IpAddr::from([127, 0, 0, 1]);
    for ip in std::iter::once(&loopback).chain(args.ips.iter().filter(|ip| **ip != loopback)) {
        sans.push(ip.to_string());
    }
    sans
}

fn write(dir: &Path, file: &str, text: &str, private: bool) -> Result<(), CertsError> {
    let path = dir.join(file);
    let err = |source| CertsError::Write {
        path: path.display().to_string(),
        source,
    };
    std::fs::write(&path, text).map_err(err)?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    Ok(())
}

/// Generates and writes the files; returns the bundle and the base64 caBundle.
pub fn write_certs(args: &CertsArgs) -> Result<(CertBundle, String), CertsError> {
    std::fs::create_dir_all(&args.out).map_err(|source| CertsError::Write {
        path: args.out.display().to_string(),
        source,
    })?;
    let bundle = generate_bundle(sans(args), args.days, args.ca_days)?;
    write(&args.out, "ca.crt", &bundle.ca_cert_pem, false)?;
    write(&args.out, "ca.key", &bundle.ca_key_pem, true)?;
    write(&args.out, "tls.crt", &bundle.cert_pem, false)?;
    write(&args.out, "tls.key", &bundle.key_pem, true)?;
    let ca_bundle = base64_simd::STANDARD.encode_to_string(&bundle.ca_cert_pem);
    Ok((bundle, ca_bundle))
}

/// Runs the command: the caBundle on stdout (for the MutatingWebhookConfiguration), the
/// files written on stderr.
pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    let (_, ca_bundle) = write_certs(&args)?;
    eprintln!(
        "wrote {dir}/ca.crt, ca.key, tls.crt, tls.key for {svc}.{ns}.svc; caBundle:",
        dir = args.out.display(),
        svc = args.service,
        ns = args.namespace
    );
    println!("{ca_bundle}");
    Ok(())
}
