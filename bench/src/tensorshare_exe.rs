//! The `tensorshare` command, which `--workload tcp` (its `echo`) and
//! `--workload files` (its `inspect` and `convert`) run: the bench times
//! the command a user runs, in a process of its own.

use std::path::PathBuf;

use tensorshare_cli::error::CliError;
use tensorshare_strategies::services::shm_manager::{ManagerError, manager_executable};

/// The `tensorshare` command, found as the runtime finds the one it runs
/// managers with: `$TENSORSHARE_EXE`, else a `tensorshare` beside this
/// program (cargo builds both into `target/<profile>/`), else one on
/// `PATH`.
pub fn tensorshare_exe() -> Result<PathBuf, CliError> {
    manager_executable().map_err(|error| match error {
        ManagerError::NoExecutable { searched } => CliError::Unsupported(format!(
            "this workload runs the `tensorshare` command, and none was found ({searched}): \
             build it beside this program (`cargo build --release -p tensorshare-cli \
             -p tensorshare-bench`), or set TENSORSHARE_EXE to one"
        )),
        other => CliError::Manager(other),
    })
}
