//! The `tensorshare` command.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line: the reason, then the chain of causes.
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&*error);
            while let Some(cause) = source {
                let cause = cause.to_string();
                if !message.contains(&cause) {
                    message.push_str(": ");
                    message.push_str(&cause);
                }
                source = cause_source(source);
            }
            eprintln!("tensorshare: error: {}", message.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn cause_source<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(std::error::Error::source)
}
