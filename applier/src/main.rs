//! koord-applier: the node DaemonSet that applies koordinator.sh/resolved-qos to cgroups.

use anyhow::Context as _;
use clap::Parser as _;
use koord_applier::cli::{self, Cli};
use koord_applier::cmd;
use koord_applier::config::{Command, Config, ConfigError};
use koord_applier::node::collectors::ignored_gates_warning;

fn main() -> anyhow::Result<()> {
    // `once --timings` reports the time from here; the rest of a whole command is the
    // process's start and exit.
    let started = std::time::Instant::now();
    // One rustls provider for the whole process (kube's client), installed before any TLS use.
    koord_runtime::install_crypto_provider();
    // koordlet-style flags (`-feature-gates=...`) work as the reference documents them.
    let args = match cli::normalize_args(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let (config, command) = match Config::from_cli(&Cli::parse_from(args)) {
        Ok(built) => built,
        // A gate nobody has is a typo: refused before anything starts, as clap refuses a flag
        // (koordlet's own gates that this product lacks are accepted, with the one warning
        // below).
        Err(e @ ConfigError::Gates(_)) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        Err(e) => return Err(e.into()),
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    koord_runtime::init_logging(config.log_format, &filter);
    if let Some(warning) = ignored_gates_warning(&config.collectors.ignored_gates) {
        tracing::warn!("{warning}");
    }
    match command {
        Command::Once(once) if once.collect => {
            print!("{}", cmd::collect::run(&config, &once)?);
            Ok(())
        }
        Command::Once(once) => {
            let report = cmd::once::run(&config, &once, started)?;
            let json = serde_json::to_string_pretty(&report).context("report to JSON")?;
            println!("{json}");
            std::process::exit(cmd::once::exit_code(&report));
        }
        Command::Run(run) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            Ok(rt.block_on(cmd::run::run(config, *run))?)
        }
    }
}
