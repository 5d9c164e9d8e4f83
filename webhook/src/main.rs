use clap::Parser;
use koord_webhook::cli::{Cli, Command};

/// mimalloc: the admission path allocates many small, short-lived objects (borrowed views,
/// maps, the patch); glibc malloc/free cost ~20% of server CPU per request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // One rustls provider for the whole process (ring), before anything touches TLS.
    koord_runtime::install_crypto_provider();
    let cli = Cli::parse();
    koord_runtime::init_logging(cli.log_format, &cli.log_level);
    let result = match cli.command {
        Command::Serve(args) => koord_webhook::server::run(*args),
        Command::Resolve(args) => return koord_webhook::resolve_cmd::run(args),
        Command::Certs(args) => koord_webhook::certs::run(args),
        Command::Doctor(args) => return koord_webhook::doctor::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
