//! koord-applier: the node DaemonSet that applies koordinator.sh/resolved-qos to cgroups.

use anyhow::Context as _;
use clap::Parser as _;
use koord_applier::cli::{Cli, Command, Config, RunConfig};
use koord_applier::cmd;

fn main() -> anyhow::Result<()> {
    // `once --timings` reports the time from here; the rest of a whole command is the
    // process's start and exit.
    let started = std::time::Instant::now();
    // One rustls provider for the whole process (kube's client), installed before any TLS use.
    koord_runtime::install_crypto_provider();
    // koordlet-style flags (`-feature-gates=...`) work as the reference documents them.
    let args = match koord_applier::cli::normalize_args(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let cli = Cli::parse_from(args);
    let config = Config::from(&cli.global);
    // A gate nobody has is a typo: refused before anything starts (koordlet's own gates that
    // this product lacks are accepted, with the one warning below).
    if let Err(e) = koord_applier::node::collectors::parse_gates(&config.collectors.feature_gates) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    koord_runtime::init_logging(config.log_format, &filter);
    koord_applier::node::collectors::warn_ignored_gates(&config.collectors);
    match &cli.command {
        Command::Once(args) if args.collect => {
            let text = cmd::collect::run(&config, &args.file, args.collect_serve.as_deref())?;
            print!("{text}");
            Ok(())
        }
        Command::Once(args) => {
            let report = cmd::once::run(&config, &args.file, args.timings.then_some(started))?;
            let json = serde_json::to_string_pretty(&report).context("report to JSON")?;
            println!("{json}");
            std::process::exit(cmd::once::exit_code(&report));
        }
        Command::Run(args) => {
            let run = RunConfig::try_from(args.as_ref())?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            Ok(rt.block_on(cmd::run::run(config, run))?)
        }
    }
}
