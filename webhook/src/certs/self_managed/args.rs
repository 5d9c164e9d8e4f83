//! The self-managed certificate flags (`--tls-secret` and friends), each with a `KOORD_*`
//! variable, and their typed form.

use std::time::Duration;

use crate::certs::rotation::RotationPolicy;
use crate::duration::parse_duration;

#[derive(Debug, Clone, clap::Args)]
pub struct SelfCertArgs {
    /// Self-managed certificates: serve the certificate of this Secret (in --own-namespace,
    /// read through the API, no volume); the Lease holder creates and rotates it and
    /// publishes its CA in the caBundle of --webhook-configuration. Instead of --tls-cert.
    #[arg(long, env = "KOORD_TLS_SECRET", conflicts_with_all = ["tls_cert", "tls_key", "standalone"])]
    pub tls_secret: Option<String>,
    /// The MutatingWebhookConfiguration whose caBundle the self-managed CA goes into (only
    /// this one is ever written).
    #[arg(
        long,
        env = "KOORD_WEBHOOK_CONFIGURATION",
        default_value = "koord-webhook"
    )]
    pub webhook_configuration: String,
    /// The webhook Service: the serving certificate is made for `NAME.NAMESPACE.svc`.
    #[arg(long, env = "KOORD_WEBHOOK_SERVICE", default_value = "koord-webhook")]
    pub webhook_service: String,
    /// Lifetime of a self-managed serving certificate; renewed at 2/3 of it.
    #[arg(long, env = "KOORD_CERT_VALIDITY", default_value = "90d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// Lifetime of the self-managed CA; renewed (with a new serving certificate) at 2/3 of it.
    #[arg(long, env = "KOORD_CA_VALIDITY", default_value = "365d", value_parser = parse_duration)]
    pub ca_validity: Duration,
    /// A replica serves a certificate from a new CA only once that CA has been in the
    /// published caBundle this long (kube-apiserver needs to see it first).
    #[arg(long, env = "KOORD_CERT_SWITCH_DELAY", default_value = "10s", value_parser = parse_duration)]
    pub cert_switch_delay: Duration,
    /// Previous CAs stay in the caBundle this long after a new CA was made.
    #[arg(long, env = "KOORD_CA_OVERLAP", default_value = "24h", value_parser = parse_duration)]
    pub ca_overlap: Duration,
}

/// Where the self-managed certificate lives and how it rotates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfCertConfig {
    pub secret: String,
    pub namespace: String,
    pub webhook_configuration: String,
    pub service: String,
    pub policy: RotationPolicy,
    pub switch_delay: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelfCertConfigError {
    #[error("--cert-validity must be at least 1m, not {0:?}")]
    CertValidity(Duration),
    #[error("--ca-validity ({ca:?}) must be longer than --cert-validity ({cert:?})")]
    CaValidity { ca: Duration, cert: Duration },
    #[error("--tls-secret must not be empty")]
    EmptySecret,
}

impl SelfCertConfig {
    /// `None` without `--tls-secret`.
    pub fn from_args(
        args: &SelfCertArgs,
        own_namespace: &str,
    ) -> Result<Option<Self>, SelfCertConfigError> {
        let Some(secret) = &args.tls_secret else {
            return Ok(None);
        };
        if secret.trim().is_empty() {
            return Err(SelfCertConfigError::EmptySecret);
        }
        if args.cert_validity < Duration::from_secs(60) {
            return Err(SelfCertConfigError::CertValidity(args.cert_validity));
        }
        if args.ca_validity <= args.cert_validity {
            return Err(SelfCertConfigError::CaValidity {
                ca: args.ca_validity,
                cert: args.cert_validity,
            });
        }
        Ok(Some(SelfCertConfig {
            secret: secret.trim().to_owned(),
            namespace: own_namespace.to_owned(),
            webhook_configuration: args.webhook_configuration.clone(),
            service: args.webhook_service.clone(),
            policy: RotationPolicy {
                ca_lifetime: args.ca_validity,
                cert_lifetime: args.cert_validity,
                retire_after: args.ca_overlap,
            },
            switch_delay: args.cert_switch_delay,
        }))
    }

    /// The name kube-apiserver verifies the certificate for.
    pub fn dns_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    /// The names the serving certificate is made for: the Service's, plus loopback for
    /// port-forwards.
    pub fn sans(&self) -> Vec<String> {
        let mut sans = crate::certs::service_dns_names(&self.service, &self.namespace);
        sans.push("localhost".into());
        sans.push("127.0.0.1".into());
        sans
    }
}
