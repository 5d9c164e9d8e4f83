//! The global tracing subscriber: logs go to stderr (stdout is for command output), as text or
//! as one JSON object per line.

use clap::ValueEnum;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber with an env-filter directive string (`info`,
/// `info,koord_webhook=debug`). An invalid directive falls back to `info` rather than failing
/// start-up over a log setting; a second call (a test harness) keeps the first subscriber.
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
