//! A usage error the bench finds after parsing (flags that do not go with
//! the workload, an unknown feed): made raw here, and formatted by `main`
//! with the bench's usage, as clap formats its own.

use clap::error::ErrorKind;
use tensorshare_cli::error::CliError;

/// A usage error, which `main` prints as clap prints its own (`error:
/// ...`, then the usage) and exits with clap's status, 2.
pub fn usage_error(kind: ErrorKind, message: impl std::fmt::Display) -> CliError {
    CliError::Usage(clap::Error::raw(kind, message))
}
