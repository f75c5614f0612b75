//! A usage error a command finds after parsing (conflicting authkey
//! sources, flags that do not go together): made raw here, and formatted
//! by `main` with the usage of the subcommand that ran
//! ([`with_usage_of`](super::with_usage_of)), as clap formats its own.

use clap::error::ErrorKind;

/// A usage error of the running subcommand, which `main` prints as clap
/// prints its own (`error: ...`, then the usage) and exits with clap's
/// status.
pub fn usage_error(kind: ErrorKind, message: impl std::fmt::Display) -> clap::Error {
    clap::Error::raw(kind, message)
}
