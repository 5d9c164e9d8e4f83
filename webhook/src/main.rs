use clap::Parser;
use koord_webhook::cli::{Cli, Command, init_logging};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log_level);
    let result = match cli.command {
        Command::Serve(args) => koord_webhook::server::run(args),
        Command::Resolve(args) => return koord_webhook::resolve_cmd::run(args),
        Command::Certs(args) => koord_webhook::certs::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
