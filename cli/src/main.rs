//! The `tensorshare` command.

// Its doc comments are its --help text, written for a terminal, where
// `tensorshare-sharer-<pid>-XXXXXXXX` is a pattern, not an HTML tag; its
// manual is the crate docs of its library.
#![allow(rustdoc::invalid_html_tags)]

mod commands;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use tensorshare_cli::error::{CliError, ERROR_PREFIX, one_line};

/// Messages are made of many small allocations, which mimalloc serves
/// faster than glibc's allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // As `Cli::parse`, keeping the matches for the name of the subcommand
    // that runs.
    let matches = commands::Cli::command().get_matches();
    let args = commands::Cli::from_arg_matches(&matches)
        .unwrap_or_else(|error| error.format(&mut commands::Cli::command()).exit());
    match commands::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // Found after parsing (conflicting authkey sources, ...).
        Err(CliError::Usage(usage)) => {
            commands::with_usage_of(usage, matches.subcommand_name()).exit()
        }
        Err(error) => {
            // As clap starts its usage errors, so that every error the
            // command prints reads alike.
            eprintln!("{ERROR_PREFIX}{}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}
