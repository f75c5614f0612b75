//! The command's error: what a failed command reports, on one line that
//! starts `error: ` ([`ERROR_PREFIX`], [`one_line`]), or, for a command
//! line it cannot use, as clap reports its own usage errors. The
//! `tensorshare` command and the `tensorshare-bench` benchmarks report
//! their errors so.
//!
//! As every error in tensorshare, each variant's message includes its
//! cause and no variant adds a `source()` (the wrapped errors have none
//! either), so [`one_line`] prints each cause once. The wrapped errors
//! print as they are: the command's messages are those of the errors it
//! meets.

use std::io;

use tensorshare::connection::ConnectionError;
use tensorshare::model::AllocateError;
use tensorshare::sharing::ImportError;
use tensorshare_strategies::UnknownStrategyError;
use tensorshare_strategies::services::orphans::ScanError;
use tensorshare_strategies::services::shm_manager::ManagerError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A command line clap let through that the command cannot use
    /// (conflicting authkey sources, a count of zero, ...): printed by clap
    /// with the usage, and the command exits with clap's status, 2. A
    /// command makes it raw (`clap::Error::raw`); the program's `main`
    /// formats it with the usage of the command line that was parsed.
    #[error(transparent)]
    Usage(clap::Error),
    /// The runtime failed: loading, sharing, a connection.
    #[error(transparent)]
    Runtime(tensorshare::Error),
    /// Reading or writing a file or a stream failed.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        cause: io::Error,
    },
    /// An OS call that needs no more words failed (installing the signal
    /// handlers, writing a line to stdout).
    #[error(transparent)]
    Os(io::Error),
    /// Shared memory could not be allocated (`demo`, the benchmarks).
    #[error(transparent)]
    Allocate(AllocateError),
    /// A raw fd received by the benchmarks could not be mapped.
    #[error(transparent)]
    Import(ImportError),
    /// A peer named a strategy that does not exist (`demo`).
    #[error(transparent)]
    UnknownStrategy(UnknownStrategyError),
    /// The shared-memory manager could not start or serve (`manager`).
    #[error(transparent)]
    Manager(ManagerError),
    /// A directory `gc` scans could not be read.
    #[error(transparent)]
    Scan(ScanError),
    /// A report could not be written as JSON (`gc --json`).
    #[error(transparent)]
    Json(serde_json::Error),
    /// Something the command cannot do with this input or here; the
    /// message says what to do instead.
    #[error("{0}")]
    Unsupported(String),
    /// Anything else that failed, said in full.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// A usage error found after parsing (conflicting authkey sources,
    /// flags that do not go together), made raw: the program's `main`
    /// formats it with the usage of the command line that was parsed, as
    /// clap formats its own, and exits with clap's status, 2.
    pub fn usage(kind: clap::error::ErrorKind, message: impl std::fmt::Display) -> Self {
        CliError::Usage(clap::Error::raw(kind, message))
    }

    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, cause: io::Error) -> Self {
        CliError::Io {
            context: context.into(),
            cause,
        }
    }
}

/// `From` conversions, each into its variant; written out because
/// thiserror's `#[from]` would also make the wrapped error the `source()`.
macro_rules! from_wrapped {
    ($($variant:ident($wrapped:ty)),* $(,)?) => {
        $(
            impl From<$wrapped> for CliError {
                fn from(error: $wrapped) -> Self {
                    CliError::$variant(error)
                }
            }
        )*
    };
}

from_wrapped!(
    Usage(clap::Error),
    Runtime(tensorshare::Error),
    Os(io::Error),
    Allocate(AllocateError),
    Import(ImportError),
    UnknownStrategy(UnknownStrategyError),
    Manager(ManagerError),
    Scan(ScanError),
    Json(serde_json::Error),
    Failed(String),
);

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        CliError::Failed(message.to_owned())
    }
}

/// The runtime's layer errors, as the facade's variants for them, which
/// print the same.
macro_rules! from_runtime_layer {
    ($($layer:ty),* $(,)?) => {
        $(
            impl From<$layer> for CliError {
                fn from(error: $layer) -> Self {
                    CliError::Runtime(error.into())
                }
            }
        )*
    };
}

from_runtime_layer!(
    ConnectionError,
    tensorshare::model::ViewError,
    tensorshare::model::ElementError
);

/// How the command starts an error line: as clap starts a usage error.
pub const ERROR_PREFIX: &str = "error: ";

/// An error and its causes on one line, each cause once.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message.replace('\n', " ")
}

/// How a program of this workspace ends after `ran`: success, a usage
/// error found after parsing, written as `usage` formats it (with the
/// program's or the subcommand's usage) and exiting as clap does, or any
/// other error on one line after [`ERROR_PREFIX`], as clap starts its
/// usage errors, so that every error reads alike.
pub fn exit_code(
    ran: Result<(), CliError>,
    usage: impl FnOnce(clap::Error) -> clap::Error,
) -> std::process::ExitCode {
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(CliError::Usage(error)) => usage(error).exit(),
        Err(error) => {
            eprintln!("{ERROR_PREFIX}{}", one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}
