//! Where a command gets an authkey: `TENSORSHARE_AUTHKEY`, `--authkey-file
//! PATH` or `--authkey HEX`, one of them. A key on the command line is
//! readable by every user of the machine (`ps`, `/proc/PID/cmdline`), so
//! the help recommends the other two.

use std::path::PathBuf;

use clap::Args;
use clap::error::ErrorKind;
use tensorshare::Authkey;
use tensorshare::connection::{AUTHKEY_ENV, ConnectionError};
use tensorshare_cli::error::CliError;

/// Where the help lists the authkey flags.
const HEADING: &str = "Authkey (one of TENSORSHARE_AUTHKEY, --authkey-file, --authkey)";

/// The authkey flags every command that takes a key shares.
#[derive(Debug, Args)]
pub struct AuthkeyArgs {
    /// The authkey in hex, e.g. `multiprocessing.current_process().authkey.hex()`.
    /// A command line is visible to every user on this machine through `ps`:
    /// prefer the TENSORSHARE_AUTHKEY environment variable or --authkey-file.
    #[arg(long, value_name = "HEX", value_parser = Authkey::from_hex, help_heading = HEADING)]
    authkey: Option<Authkey>,
    /// Read the authkey, in hex, from this file (a trailing newline is
    /// fine); keep the file readable by its owner only. Or set the
    /// TENSORSHARE_AUTHKEY environment variable to the key in hex.
    #[arg(
        long,
        value_name = "PATH",
        value_parser = read_authkey_file,
        conflicts_with = "authkey",
        help_heading = HEADING
    )]
    authkey_file: Option<Authkey>,
}

impl AuthkeyArgs {
    /// The key from the one source given; a usage error if none or more
    /// than one is, or if `TENSORSHARE_AUTHKEY` is not hex.
    pub fn required(&self) -> Result<Authkey, CliError> {
        self.optional()?.ok_or_else(|| {
            CliError::usage(
                ErrorKind::MissingRequiredArgument,
                format!(
                    "an authkey is required: set {AUTHKEY_ENV} to the key in hex, or pass \
                     --authkey-file PATH (or --authkey HEX, which other users can see)"
                ),
            )
        })
    }

    /// The key from the one source given, if any; a usage error if more
    /// than one is, or if `TENSORSHARE_AUTHKEY` is not hex.
    pub fn optional(&self) -> Result<Option<Authkey>, CliError> {
        let from_env = Authkey::from_env().map_err(|error| {
            let reason = match error {
                ConnectionError::InvalidAuthkey(reason) => reason,
                other => other.to_string(),
            };
            CliError::usage(
                ErrorKind::ValueValidation,
                format!("invalid authkey: {reason}"),
            )
        })?;
        let flag = match (&self.authkey, &self.authkey_file) {
            (Some(_), _) => Some("--authkey"),
            (None, Some(_)) => Some("--authkey-file"),
            (None, None) => None,
        };
        match (from_env, flag) {
            (Some(_), Some(flag)) => Err(CliError::usage(
                ErrorKind::ArgumentConflict,
                format!(
                    "{AUTHKEY_ENV} is set and {flag} is given: give the authkey one way only \
                     (unset {AUTHKEY_ENV}, or drop {flag})"
                ),
            )),
            (Some(key), None) => Ok(Some(key)),
            (None, _) => Ok(self.authkey.clone().or_else(|| self.authkey_file.clone())),
        }
    }
}

/// The key in the file at `path`, in hex; surrounding whitespace (the
/// trailing newline of `echo KEY > file`) is ignored. Messages name the
/// file, never its contents.
fn read_authkey_file(path: &str) -> Result<Authkey, String> {
    let path = PathBuf::from(path);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read it: {e}"))?;
    if text.trim().is_empty() {
        return Err("the file is empty; write the key into it in hex".to_owned());
    }
    Authkey::from_hex(&text).map_err(|error| match error {
        ConnectionError::InvalidAuthkey(reason) => reason,
        other => other.to_string(),
    })
}
