use clap::Parser;
use koord_webhook::cli::{Cli, Command};

/// mimalloc: the admission path allocates many small, short-lived objects (borrowed views,
/// maps, the patch); glibc malloc/free cost ~20% of server CPU per request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Before the allocator has touched much: a few MiB of heap must not cost 2 MiB pages
    // (docs/benchmarks.md, re-resolver memory).
    let thp = koord_runtime::disable_transparent_huge_pages();
    // One rustls provider for the whole process (ring), before anything touches TLS.
    koord_runtime::install_crypto_provider();
    let cli = Cli::parse();
    koord_runtime::init_logging(cli.log_format, &cli.log_level);
    if let Err(e) = thp {
        tracing::warn!(error = %e, "could not turn transparent huge pages off; RSS will be higher");
    }
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
