//! koord-applier: the node DaemonSet that applies koordinator.sh/resolved-qos to cgroups.

use anyhow::Context as _;
use clap::Parser as _;
use koord_applier::cli::{Cli, Command, Config, LogFormat, RunConfig};

fn main() -> anyhow::Result<()> {
    // One rustls provider for the whole process (kube's client), installed before any TLS use.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let config = Config::from(&cli.global);
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    match &cli.command {
        Command::Once(args) if args.collect => {
            let text = koord_applier::collectors::command::once_command(
                &config,
                &args.file,
                args.collect_serve.as_deref(),
            )?;
            print!("{text}");
            Ok(())
        }
        Command::Once(args) => {
            let report = koord_applier::run::once_command(&config, &args.file)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&report).context("report to JSON")?
            );
            std::process::exit(koord_applier::run::exit_code(&report));
        }
        Command::Run(args) => {
            let run = RunConfig::try_from(args)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            Ok(rt.block_on(koord_applier::run::run(config, run))?)
        }
    }
}
