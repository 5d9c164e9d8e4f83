//! The `doctor` flags, each with a `KOORD_DOCTOR_*` variable.

use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "KOORD_DOCTOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace the product is installed in.
    #[arg(
        long,
        env = "KOORD_DOCTOR_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub namespace: String,
    /// The webhook's Deployment and Service.
    #[arg(long, env = "KOORD_DOCTOR_WEBHOOK", default_value = "koord-webhook")]
    pub webhook: String,
    /// The MutatingWebhookConfiguration.
    #[arg(
        long,
        env = "KOORD_DOCTOR_WEBHOOK_CONFIGURATION",
        default_value = "koord-webhook"
    )]
    pub webhook_configuration: String,
    /// The serving certificate Secret.
    #[arg(
        long,
        env = "KOORD_DOCTOR_TLS_SECRET",
        default_value = "koord-webhook-tls"
    )]
    pub tls_secret: String,
    /// The applier's DaemonSet.
    #[arg(long, env = "KOORD_DOCTOR_APPLIER", default_value = "koord-applier")]
    pub applier: String,
    /// Namespace of the two ConfigMaps.
    #[arg(long, env = "KOORD_DOCTOR_CONFIG_NAMESPACE", default_value = koord_api::keys::CONFIG_NAMESPACE)]
    pub config_namespace: String,
    /// Namespace for the dry-run pod (default: the first opted-in namespace).
    #[arg(long, env = "KOORD_DOCTOR_DRY_RUN_NAMESPACE")]
    pub dry_run_namespace: Option<String>,
    /// `table` for a person, `json` for a script.
    #[arg(short, long, env = "KOORD_DOCTOR_OUTPUT", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}
