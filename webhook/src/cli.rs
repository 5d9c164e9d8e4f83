//! Command line: `serve`, `resolve`, `certs`. Every flag also reads an environment variable.

use clap::{Parser, Subcommand, ValueEnum};

use crate::{certs, resolve_cmd, server};

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
    /// Write a CA and a serving certificate for the webhook Service.
    Certs(certs::CertsArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global tracing subscriber (logs go to stderr; stdout is for command output).
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
