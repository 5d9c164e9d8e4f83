//! Command line: `serve`, `resolve`, `certs`, `doctor`. Every flag also reads an environment variable.
//! Logging is set up by `main` with [`koord_runtime::init_logging`].

use clap::{Parser, Subcommand};
use koord_runtime::LogFormat;

use crate::{certs, doctor, resolve_cmd, server};

#[derive(Debug, Parser)]
#[command(
    name = "koord-webhook",
    version,
    about = "Memory QoS admission webhook (koordinator.sh/resolved-qos)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, env = "KOORD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter (tracing env-filter syntax, e.g. `info,koord_webhook=debug`).
    #[arg(long, global = true, env = "KOORD_LOG", default_value = "info")]
    pub log_level: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the mutating admission webhook over TLS.
    Serve(Box<server::ServeArgs>),
    /// Resolve pod manifests offline and print them as the webhook would mutate them.
    Resolve(resolve_cmd::ResolveArgs),
    /// Write a CA and a serving certificate for the webhook Service (bring your own; the
    /// default install manages its own with `serve --tls-secret`).
    Certs(certs::CertsArgs),
    /// Check an install from a kubeconfig and name the first broken link (exit 1 if any).
    Doctor(doctor::DoctorArgs),
}
