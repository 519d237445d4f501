//! Entry point: parse the command line (under the name it was invoked as), start telemetry,
//! hand over to the chosen command.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = disruption_guard::cli::invocation::parse();
    disruption_guard::telemetry::init(cli.log_format);
    match cli.command.run(cli.connection).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::from(1)
        }
    }
}
