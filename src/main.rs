//! The `tensorshare` command.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tensorshare: error: {}", cli::one_line(&*error));
            ExitCode::FAILURE
        }
    }
}
