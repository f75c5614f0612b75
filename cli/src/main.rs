//! The `tensorshare` command.

// Its doc comments are its --help text, written for a terminal, where
// `tensorshare-sharer-<pid>-XXXXXXXX` is a pattern, not an HTML tag; its
// manual is the crate docs of its library.
#![allow(rustdoc::invalid_html_tags)]

mod commands;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use tensorshare_cli::error::exit_code;

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
    // A usage error found after parsing (conflicting authkey sources, ...)
    // shows the subcommand's usage.
    exit_code(commands::run(args), |usage| {
        commands::with_usage_of(usage, matches.subcommand_name())
    })
}
