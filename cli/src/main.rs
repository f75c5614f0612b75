//! The `tensorshare` command.

// Its doc comments are its --help text, written for a terminal, where
// `tensorshare-sharer-<pid>-XXXXXXXX` is a pattern, not an HTML tag; its
// manual is the crate docs of its library.
#![allow(rustdoc::invalid_html_tags)]

mod commands;
mod error;

use std::process::ExitCode;

use clap::Parser;

use crate::error::CliError;

/// Messages are made of many small allocations, which mimalloc serves
/// faster than glibc's allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = commands::Cli::parse();
    match commands::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // Found after parsing (conflicting authkey sources, ...).
        Err(CliError::Usage(usage)) => usage.exit(),
        Err(error) => {
            // As clap starts its usage errors, so that every error the
            // command prints reads alike.
            eprintln!("{}{}", commands::ERROR_PREFIX, commands::one_line(&error));
            ExitCode::FAILURE
        }
    }
}
