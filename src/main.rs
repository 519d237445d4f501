//! Entry point: parse the command line, start telemetry, hand over to the chosen command.

use clap::Parser;
use disruption_guard::cli::Cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    disruption_guard::telemetry::init(cli.log_format);
    match cli.command.run(cli.connection).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::from(1)
        }
    }
}
